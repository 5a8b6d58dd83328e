"""Mailgun through the ingest handler (real PostgreSQL, moto SQS). Deliveries are built with the
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
    add_provider,
    answer,
    events,
    flip,
)
from tests.unit.ingest.test_scheme_mailgun import KAT_BODY, KAT_KEY, KAT_TIMESTAMP, KAT_TOKEN
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.store import db


def documented(
    key: str, timestamp: int, event_data: dict[str, Any], token: str | None = None
) -> tuple[bytes, str]:
    """A Mailgun webhook body as Mailgun documents it, and its token."""
    token = token or uuid.uuid4().hex + uuid.uuid4().hex[:18]  # 50 characters
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256)
    document = {
        "signature": {
            "token": token,
            "timestamp": str(timestamp),
            "signature": signature.hexdigest(),
        },
        "event-data": event_data,
    }
    return json.dumps(document).encode(), token


def delivered(event_id: str | None = None) -> dict[str, Any]:
    return {
        "id": event_id or uuid.uuid4().hex[:22],
        "event": "delivered",
        "recipient": "alice@example.com",
        "message": {"headers": {"message-id": "m1@example.com"}},
    }


def test_documented_deliveries_are_accepted_through_every_event_shape(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        event_data = delivered()
        body, token = documented(secret_of("mailgun"), harness.now, event_data)
        got = answer(
            harness,
            "mailgun",
            body,
            {"Content-Type": "application/json"},
            shape=shape,
            base64_body=b64,
        )
        assert got == ACCEPTED_200, (shape, b64)  # Mailgun counts only 200 as success
        row = events(conn, "mailgun")[-1]
        assert (row["event_id"], row["event_type"], row["delivery_id"]) == (
            token,
            "delivered",
            event_data["id"],
        )
        assert row["payload"] == json.loads(body)
        assert row["enqueued_at"] is not None
    assert len(harness.queued()) == len(SHAPE_VARIANTS)


def test_a_captured_token_yields_one_event_whatever_event_data_is_attached(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, token = documented(secret_of("mailgun"), harness.now, delivered("original"))
    assert answer(harness, "mailgun", body, {}) == ACCEPTED_200
    assert answer(harness, "mailgun", body, {}) == DUPLICATE
    # The signature does not cover event-data: glue other event-data to the captured signature.
    forged = json.loads(body)
    forged["event-data"] = delivered("forged") | {"event": "failed"}
    assert answer(harness, "mailgun", json.dumps(forged).encode(), {}) == DUPLICATE
    (row,) = events(conn, "mailgun")
    assert row["event_id"] == token
    assert row["payload"]["event-data"]["id"] == "original"  # the first one stays
    assert row["delivery_count"] == 3
    assert len(harness.queued()) == 1


def test_a_change_to_anything_signed_is_401_and_no_row(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, token = documented(secret_of("mailgun"), harness.now, delivered())
    original = json.loads(body)
    signature = original["signature"]
    flipped = flip(signature["signature"])
    mutations = {
        "token": {**signature, "token": "x" + token[1:]},
        "timestamp": {**signature, "timestamp": str(harness.now - 1)},
        "signature": {**signature, "signature": flipped},
    }
    bodies = [json.dumps({**original, "signature": s}).encode() for s in mutations.values()]
    bodies.append(documented("not-the-key", harness.now, delivered())[0])
    bodies.append(body.replace(b'"signature": {', b'"signaturf": {', 1))
    for mutated in bodies:
        for shape, b64 in (("v1", False), ("function-url", True)):
            assert (
                answer(harness, "mailgun", mutated, {}, shape=shape, base64_body=b64)
                == UNAUTHORIZED
            )
    assert row_count(conn) == 0
    assert harness.queued() == []


@pytest.mark.parametrize(("offset", "status"), [(300, 200), (-300, 200), (301, 401), (-301, 401)])
def test_stale_and_future_timestamps_are_401(
    offset: int, status: int, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, _ = documented(secret_of("mailgun"), harness.now - offset, delivered())
    assert answer(harness, "mailgun", body, {}).status == status
    assert row_count(conn) == (1 if status == 200 else 0)


def test_the_published_vector_is_accepted_by_the_handler(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_provider(monkeypatch, "kat-mailgun", "mailgun", KAT_KEY)
    monkeypatch.setattr(ingest, "current_time", lambda: float(KAT_TIMESTAMP))
    assert answer(harness, "kat-mailgun", KAT_BODY, {}, shape="v1") == ACCEPTED_200
    (row,) = events(conn, "kat-mailgun")
    assert (row["event_id"], row["event_type"]) == (KAT_TOKEN, "delivered")


def test_a_transient_failure_is_a_503_mailgun_retries_never_a_406(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body, _ = documented(secret_of("mailgun"), harness.now, delivered())
    monkeypatch.setenv("DATABASE_URL", "postgresql://ingest@127.0.0.1:9/nowhere")
    monkeypatch.setenv("DB_CONNECT_TIMEOUT_S", "2")
    db.reset_for_tests()
    assert answer(harness, "mailgun", body, {}).status == 503  # 406 would stop the retries
    assert row_count(conn) == 0
    monkeypatch.setenv("DATABASE_URL", database_url)
    db.reset_for_tests()  # the settings were read by the first delivery
    assert answer(harness, "mailgun", body, {}) == ACCEPTED_200
