"""Zoom through the ingest handler (real PostgreSQL, moto SQS). Deliveries are built with the
documented recipe in plain hmac, independently of the scheme code; the url_validation handshake
is answered only when its own signature verified (anything else would be a signing oracle)."""

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


def documented(body: bytes, timestamp: int, secret: str | None = None) -> dict[str, str]:
    key = (secret or secret_of("zoom")).encode()
    digest = hmac.new(key, f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {
        "x-zm-signature": f"v0={digest}",
        "x-zm-request-timestamp": str(timestamp),
        "x-zm-trackingid": f"v=2.0;clid=us06;rid={uuid.uuid4().hex}",
        "content-type": "application/json; charset=utf-8",
    }


def meeting_started(now: int) -> bytes:
    document = {
        "event": "meeting.started",
        "event_ts": now * 1000,
        "payload": {"account_id": "acc-1", "object": {"id": uuid.uuid4().hex, "topic": "Sync"}},
    }
    return json.dumps(document, separators=(",", ":")).encode()


def validation(plain_token: str) -> bytes:
    document = {
        "payload": {"plainToken": plain_token},
        "event_ts": 1654503849680,
        "event": "endpoint.url_validation",
    }
    return json.dumps(document, separators=(",", ":")).encode()


def test_documented_deliveries_are_accepted_through_every_event_shape(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        body = meeting_started(harness.now)
        headers = documented(body, harness.now)
        got = answer(harness, "zoom", body, headers, shape=shape, base64_body=b64)
        assert got == ACCEPTED_200, (shape, b64)  # Zoom documents 200 or 204
        row = events(conn, "zoom")[-1]
        assert row["event_type"] == "meeting.started"
        assert row["event_id"] == (
            "sha256:" + hashlib.sha256(b"meeting.started\x00" + body).hexdigest()
        )
        assert row["delivery_id"] == headers["x-zm-trackingid"]
        assert row["payload"] == json.loads(body)
    assert len(harness.queued()) == len(SHAPE_VARIANTS)


def test_a_redelivery_signed_again_later_is_a_duplicate(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body = meeting_started(harness.now)
    assert answer(harness, "zoom", body, documented(body, harness.now)) == ACCEPTED_200
    assert answer(harness, "zoom", body, documented(body, harness.now - 200)) == DUPLICATE
    (row,) = events(conn, "zoom")
    assert row["delivery_count"] == 2


def test_an_authentic_url_validation_is_answered_and_not_stored(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        body = validation("qgg8vlvZRS6UYooatFL8Aw")
        got = answer(
            harness, "zoom", body, documented(body, harness.now), shape=shape, base64_body=b64
        )
        expected = hmac.new(
            secret_of("zoom").encode(), b"qgg8vlvZRS6UYooatFL8Aw", hashlib.sha256
        ).hexdigest()
        assert (got.status, got.content_type) == (200, "application/json")
        assert json.loads(got.body) == {
            "plainToken": "qgg8vlvZRS6UYooatFL8Aw",
            "encryptedToken": expected,
        }
    assert row_count(conn) == 0
    assert harness.queued() == []


@pytest.mark.parametrize("case", ["unsigned", "other secret", "stale", "flipped body"])
def test_a_url_validation_that_does_not_verify_gets_no_encrypted_token(
    case: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    # Answering these would let anyone obtain HMAC(secret, any text): a signing oracle.
    plain = "chosen-by-the-attacker"
    body = validation(plain)
    headers = {
        "unsigned": {"content-type": "application/json"},
        "other secret": documented(body, harness.now, secret="guess"),
        "stale": documented(body, harness.now - 301),
        "flipped body": documented(validation(plain + "x"), harness.now),
    }[case]
    got = answer(harness, "zoom", body, headers)
    assert got == UNAUTHORIZED
    assert (
        hmac.new(secret_of("zoom").encode(), plain.encode(), "sha256").hexdigest() not in got.body
    )
    assert row_count(conn) == 0


def test_one_flipped_byte_or_another_key_is_401_and_no_row(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body = meeting_started(harness.now)
    headers = documented(body, harness.now)
    flipped = bytearray(body)
    flipped[len(flipped) // 2] ^= 0x01
    signature = headers["x-zm-signature"]
    mutations = [
        (bytes(flipped), headers),
        (body, {**headers, "x-zm-request-timestamp": str(harness.now - 1)}),
        (
            body,
            {
                **headers,
                "x-zm-signature": flip(signature),
            },
        ),
        (body, documented(body, harness.now, secret="not-the-secret")),
    ]
    for mutated, mutated_headers in mutations:
        for shape, b64 in (("v1", False), ("function-url", True)):
            got = answer(harness, "zoom", mutated, mutated_headers, shape=shape, base64_body=b64)
            assert got == UNAUTHORIZED
    assert row_count(conn) == 0


@pytest.mark.parametrize(("offset", "status"), [(300, 200), (-300, 200), (301, 401), (-301, 401)])
def test_stale_and_future_timestamps_are_401(
    offset: int, status: int, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body = meeting_started(harness.now)
    assert answer(harness, "zoom", body, documented(body, harness.now - offset)).status == status
    assert row_count(conn) == (1 if status == 200 else 0)
