"""GitLab through the ingest handler (real PostgreSQL, moto SQS): the secret token as GitLab
documents it (the configured token, verbatim, in ``X-Gitlab-Token``), and the signing token,
signed here with the ``standardwebhooks`` library as oracle."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import standardwebhooks

from tests.integration.ingest.conftest import IngestHarness, row_count, secret_of
from tests.integration.ingest.senders import (
    DUPLICATE,
    SHAPE_VARIANTS,
    UNAUTHORIZED,
    Answer,
    answer,
    events,
    flip,
)

ACCEPTED = Answer(202, "application/json", '{"status":"accepted"}')


def push() -> bytes:
    commit = uuid.uuid4().hex + uuid.uuid4().hex[:8]
    document = {"object_kind": "push", "ref": "refs/heads/main", "after": commit, "project_id": 15}
    return json.dumps(document).encode()


def documented(token: str | None = None, **extra: str) -> dict[str, str]:
    """Headers as GitLab sends them with a secret token (Idempotency-Key since GitLab 17)."""
    return {
        "X-Gitlab-Token": token or secret_of("gitlab"),
        "X-Gitlab-Event": "Push Hook",
        "X-Gitlab-Event-UUID": str(uuid.uuid4()),
        "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
        "Idempotency-Key": str(uuid.uuid4()),
        "Content-Type": "application/json",
        **extra,
    }


def test_documented_deliveries_are_accepted_through_every_event_shape(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        body, headers = push(), documented()
        got = answer(harness, "gitlab", body, headers, shape=shape, base64_body=b64)
        assert got == ACCEPTED, (shape, b64)
        row = events(conn, "gitlab")[-1]
        assert (row["event_id"], row["event_type"], row["delivery_id"]) == (
            headers["Idempotency-Key"],
            "Push Hook",
            headers["X-Gitlab-Event-UUID"],
        )
        assert row["payload"] == json.loads(body)
    assert len(harness.queued()) == len(SHAPE_VARIANTS)


def test_a_resend_keeps_its_idempotency_key_and_is_a_duplicate(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers = push(), documented()
    assert answer(harness, "gitlab", body, headers) == ACCEPTED
    resend = {**headers, "X-Gitlab-Webhook-UUID": str(uuid.uuid4())}
    assert answer(harness, "gitlab", body, resend) == DUPLICATE
    # Without Idempotency-Key (older GitLab): X-Gitlab-Event-UUID, else the body digest.
    older = {k: v for k, v in headers.items() if k != "Idempotency-Key"}
    assert answer(harness, "gitlab", body, older) == ACCEPTED
    assert answer(harness, "gitlab", body, older) == DUPLICATE
    oldest = {k: v for k, v in older.items() if k != "X-Gitlab-Event-UUID"}
    assert answer(harness, "gitlab", body, oldest) == ACCEPTED
    keys = [r["event_id"] for r in events(conn, "gitlab")]
    digest = "sha256:" + hashlib.sha256(b"Push Hook\x00" + body).hexdigest()
    assert keys == [headers["Idempotency-Key"], headers["X-Gitlab-Event-UUID"], digest]


@pytest.mark.parametrize(
    "token",
    ["missing", "flipped", "other", "prefix", "empty"],
)
def test_a_wrong_or_missing_token_is_401_and_no_row(
    token: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    secret = secret_of("gitlab")
    headers = {
        "missing": {k: v for k, v in documented().items() if k != "X-Gitlab-Token"},
        "flipped": documented(flip(secret)),
        "other": documented("not-the-token"),
        "prefix": documented(secret[:-1]),
        "empty": documented() | {"X-Gitlab-Token": ""},
    }[token]
    for shape, b64 in (("v1", False), ("function-url", True)):
        got = answer(harness, "gitlab", push(), headers, shape=shape, base64_body=b64)
        assert got == UNAUTHORIZED
    assert row_count(conn) == 0


def test_with_the_token_any_body_is_accepted_the_weaker_guarantee(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    # The token authenticates the sender, not the content: a body altered after GitLab sent it
    # is accepted. This is GitLab's design (docs/providers.md); the signing token closes it.
    body, headers = push(), documented()
    altered = body.replace(b"refs/heads/main", b"refs/heads/evil")
    assert answer(harness, "gitlab", altered, headers) == ACCEPTED
    assert events(conn, "gitlab")[0]["payload"]["ref"] == "refs/heads/evil"


def signing_token_delivery(now: int, body: bytes, key: str | None = None) -> dict[str, str]:
    key = key or str(uuid.uuid4())
    signature = standardwebhooks.Webhook(secret_of("gitlab-signed")).sign(
        key, datetime.fromtimestamp(now, tz=UTC), body.decode()
    )
    return {
        "webhook-id": key,
        "webhook-timestamp": str(now),
        "webhook-signature": signature,
        "Idempotency-Key": key,
        "X-Gitlab-Event": "Push Hook",
        "X-Gitlab-Event-UUID": str(uuid.uuid4()),
    }


def test_signing_token_deliveries_are_accepted_and_keyed_by_the_signed_webhook_id(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        body = push()
        headers = signing_token_delivery(harness.now, body)
        got = answer(harness, "gitlab-signed", body, headers, shape=shape, base64_body=b64)
        assert got == ACCEPTED, (shape, b64)
        row = events(conn, "gitlab-signed")[-1]
        assert (row["event_id"], row["event_type"]) == (headers["webhook-id"], "Push Hook")
    # A retry re-signed later with the same webhook-id is a duplicate.
    body = push()
    key = str(uuid.uuid4())
    assert (
        answer(harness, "gitlab-signed", body, signing_token_delivery(harness.now - 60, body, key))
        == ACCEPTED
    )
    assert (
        answer(harness, "gitlab-signed", body, signing_token_delivery(harness.now, body, key))
        == DUPLICATE
    )


def test_with_the_signing_token_a_flipped_byte_stale_time_or_token_alone_is_401(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body = push()
    headers = signing_token_delivery(harness.now, body)
    altered = body.replace(b"refs/heads/main", b"refs/heads/evil")
    cases = [
        (altered, headers),
        (body, {**headers, "webhook-id": headers["webhook-id"] + "x"}),
        (body, signing_token_delivery(harness.now - 301, body)),
        (body, signing_token_delivery(harness.now + 301, body)),
        (body, {"X-Gitlab-Token": secret_of("gitlab-signed"), "X-Gitlab-Event": "Push Hook"}),
    ]
    for mutated, mutated_headers in cases:
        assert answer(harness, "gitlab-signed", mutated, mutated_headers) == UNAUTHORIZED
    assert row_count(conn) == 0
