"""Linear through the ingest handler (real PostgreSQL, moto SQS). Deliveries are built with the
documented recipe in plain hmac, independently of the scheme code."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from typing import Any

import psycopg
import pytest

from tests.integration.ingest.conftest import IngestHarness, row_count, secret_of
from tests.integration.ingest.senders import (
    ACCEPTED_200,
    DUPLICATE,
    SHAPE_VARIANTS,
    UNAUTHORIZED,
    answer,
    events,
    flip,
)


def issue(stamp_s: int, issue_id: str | None = None, **fields: Any) -> dict[str, Any]:
    return {
        "action": "update",
        "type": "Issue",
        "organizationId": "org-1",
        "data": {"id": issue_id or str(uuid.uuid4()), "title": "Fix it", "priority": 2},
        "updatedFrom": {"priority": 3},
        "webhookTimestamp": stamp_s * 1000,
        **fields,
    }


def documented(document: dict[str, Any], secret: str | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers as Linear sends them: hex HMAC-SHA256 of the raw body."""
    body = json.dumps(document, separators=(",", ":")).encode()
    key = (secret or secret_of("linear")).encode()
    return body, {
        "Linear-Signature": hmac.new(key, body, hashlib.sha256).hexdigest(),
        "Linear-Delivery": str(uuid.uuid4()),
        "Linear-Event": document["type"],
        "Content-Type": "application/json; charset=utf-8",
    }


def test_documented_deliveries_are_accepted_through_every_event_shape(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        body, headers = documented(issue(harness.now))
        got = answer(harness, "linear", body, headers, shape=shape, base64_body=b64)
        assert got == ACCEPTED_200, (shape, b64)  # Linear counts non-200 as a failure
        row = events(conn, "linear")[-1]
        assert row["event_type"] == "Issue.update"
        assert row["delivery_id"] == headers["Linear-Delivery"]
        assert row["event_id"].startswith("sha256:")
        assert row["payload"] == json.loads(body)
    assert len(harness.queued()) == len(SHAPE_VARIANTS)


def test_a_retry_with_a_fresh_timestamp_and_delivery_id_is_a_duplicate(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook_inbox.ingest import pipeline as ingest

    issue_id = str(uuid.uuid4())
    first, first_headers = documented(issue(harness.now, issue_id))
    assert answer(harness, "linear", first, first_headers) == ACCEPTED_200
    # Linear retries an hour later: a new webhookTimestamp, so other bytes and signature.
    later = harness.now + 3600
    monkeypatch.setattr(ingest, "current_time", lambda: float(later))
    retry, retry_headers = documented(issue(later, issue_id))
    assert retry != first
    assert answer(harness, "linear", retry, retry_headers) == DUPLICATE
    # Another change to the same issue is another event.
    other, other_headers = documented(issue(later, issue_id, action="remove"))
    assert answer(harness, "linear", other, other_headers) == ACCEPTED_200
    rows = events(conn, "linear")
    assert [(r["event_type"], r["delivery_count"]) for r in rows] == [
        ("Issue.update", 2),
        ("Issue.remove", 1),
    ]
    assert len(harness.queued()) == 2


def test_one_flipped_byte_or_another_key_is_401_and_no_row(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers = documented(issue(harness.now))
    signature = headers["Linear-Signature"]
    flipped = bytearray(body)
    flipped[len(flipped) // 2] ^= 0x01
    restamped = body.replace(str(harness.now * 1000).encode(), str(harness.now * 1000 - 1).encode())
    mutations = [
        (bytes(flipped), headers),
        (restamped, headers),  # the timestamp lives in the signed body
        (
            body,
            {
                **headers,
                "Linear-Signature": flip(signature),
            },
        ),
        documented(issue(harness.now), secret="not-the-secret"),
        (body, {k: v for k, v in headers.items() if k != "Linear-Signature"}),
    ]
    for mutated, mutated_headers in mutations:
        for shape, b64 in (("v1", False), ("function-url", True)):
            got = answer(harness, "linear", mutated, mutated_headers, shape=shape, base64_body=b64)
            assert got == UNAUTHORIZED
    assert row_count(conn) == 0
    assert harness.queued() == []


@pytest.mark.parametrize(("offset", "status"), [(60, 200), (-60, 200), (61, 401), (-61, 401)])
def test_the_sixty_second_window_applies_both_ways(
    offset: int, status: int, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers = documented(issue(harness.now - offset))
    assert answer(harness, "linear", body, headers).status == status
    assert row_count(conn) == (1 if status == 200 else 0)


def test_a_signed_body_without_webhook_timestamp_is_401(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    document = issue(harness.now)
    del document["webhookTimestamp"]
    body, headers = documented(document)
    assert answer(harness, "linear", body, headers) == UNAUTHORIZED
    assert row_count(conn) == 0
