"""Twitch EventSub through the ingest handler (real PostgreSQL, moto SQS). Deliveries are built
with the documented recipe in plain hmac, independently of the scheme code."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import psycopg
import pytest

from tests.integration.ingest.conftest import IngestHarness, row_count, secret_of
from tests.integration.ingest.senders import (
    DUPLICATE,
    SHAPE_VARIANTS,
    UNAUTHORIZED,
    Answer,
    add_provider,
    answer,
    events,
    flip,
)
from tests.unit.ingest.test_scheme_twitch import (
    KAT_BODY,
    KAT_ID,
    KAT_NOW,
    KAT_SECRET,
    KAT_SIGNATURE,
    KAT_TIMESTAMP,
)
from webhook_inbox.ingest import pipeline as ingest

ACCEPTED = Answer(202, "application/json", '{"status":"accepted"}')  # any 2xx acknowledges
SUBSCRIPTION = {
    "id": "f1c2a387-161a-49f9-a165-0f21d7a4e1c4",
    "status": "enabled",
    "type": "channel.follow",
    "version": "2",
    "condition": {"broadcaster_user_id": "1337", "moderator_user_id": "1337"},
    "transport": {"method": "webhook", "callback": "https://example.com/webhooks/twitch"},
    "created_at": "2019-11-16T10:11:12.634234626Z",
}


def stamp(unix: float) -> str:
    """RFC 3339 with seven fractional digits, as in Twitch's own example."""
    whole = int(unix)
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        + f".{int((unix - whole) * 10**7):07d}Z"
    )


def documented(
    document: dict[str, Any],
    unix: float,
    *,
    kind: str = "notification",
    message_id: str | None = None,
    secret: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(document, separators=(",", ":")).encode()
    message_id = message_id or str(uuid.uuid4())
    timestamp = stamp(unix)
    key = (secret or secret_of("twitch")).encode()
    digest = hmac.new(key, (message_id + timestamp).encode() + body, hashlib.sha256).hexdigest()
    return body, {
        "Twitch-Eventsub-Message-Id": message_id,
        "Twitch-Eventsub-Message-Retry": "0",
        "Twitch-Eventsub-Message-Type": kind,
        "Twitch-Eventsub-Message-Signature": f"sha256={digest}",
        "Twitch-Eventsub-Message-Timestamp": timestamp,
        "Twitch-Eventsub-Subscription-Type": "channel.follow",
        "Twitch-Eventsub-Subscription-Version": "2",
        "Content-Type": "application/json",
    }


def follow() -> dict[str, Any]:
    event = {
        "user_id": str(uuid.uuid4().int % 10**8),
        "user_login": "cool_user",
        "broadcaster_user_id": "1337",
    }
    return {"subscription": SUBSCRIPTION, "event": event}


def test_documented_notifications_are_accepted_through_every_event_shape(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        body, headers = documented(follow(), harness.now + 0.25)
        got = answer(harness, "twitch", body, headers, shape=shape, base64_body=b64)
        assert got == ACCEPTED, (shape, b64)
        row = events(conn, "twitch")[-1]
        assert row["event_id"] == headers["Twitch-Eventsub-Message-Id"]
        assert row["event_type"] == "channel.follow"
        assert row["payload"] == json.loads(body)
    assert len(harness.queued()) == len(SHAPE_VARIANTS)


def test_a_redelivery_of_the_same_message_id_is_a_duplicate(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    document = follow()
    body, headers = documented(document, harness.now - 30, message_id="msg-redelivered")
    assert answer(harness, "twitch", body, headers) == ACCEPTED
    # Twitch resends with the same id and the retry counter raised (re-signed, here, later).
    again, again_headers = documented(document, harness.now, message_id="msg-redelivered")
    again_headers["Twitch-Eventsub-Message-Retry"] = "1"
    assert answer(harness, "twitch", again, again_headers) == DUPLICATE
    (row,) = events(conn, "twitch")
    assert row["delivery_count"] == 2


def test_an_authentic_challenge_is_answered_with_the_raw_text_and_not_stored(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    challenge = "pogchamp-kappa-360noscope-vohiyo"
    pending = SUBSCRIPTION | {"status": "webhook_callback_verification_pending"}
    for shape, b64 in SHAPE_VARIANTS:
        body, headers = documented(
            {"challenge": challenge, "subscription": pending},
            harness.now,
            kind="webhook_callback_verification",
        )
        got = answer(harness, "twitch", body, headers, shape=shape, base64_body=b64)
        assert got == Answer(200, "text/plain", challenge), (shape, b64)
    assert row_count(conn) == 0
    assert harness.queued() == []


@pytest.mark.parametrize("case", ["unsigned", "other secret", "stale", "stored as an event"])
def test_a_challenge_that_does_not_verify_is_not_answered(
    case: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    document = {"challenge": "echo-me", "subscription": SUBSCRIPTION}
    kind = "notification" if case == "stored as an event" else "webhook_callback_verification"
    body, headers = documented(
        document,
        harness.now - (601 if case == "stale" else 0),
        kind=kind,
        secret="guess" if case == "other secret" else None,
    )
    if case == "unsigned":
        headers.pop("Twitch-Eventsub-Message-Signature")
    got = answer(harness, "twitch", body, headers)
    assert "echo-me" not in got.body
    # A genuine challenge relabelled as a notification (the type header is not signed) is a 400.
    assert got.status == (400 if case == "stored as an event" else 401)
    assert row_count(conn) == 0


def test_a_revocation_is_stored_as_a_revocation_event(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    revoked = SUBSCRIPTION | {"status": "authorization_revoked"}
    body, headers = documented({"subscription": revoked}, harness.now, kind="revocation")
    assert answer(harness, "twitch", body, headers) == ACCEPTED
    (row,) = events(conn, "twitch")
    assert (row["event_id"], row["event_type"]) == (
        headers["Twitch-Eventsub-Message-Id"],
        "revocation",
    )
    assert row["payload"]["subscription"]["status"] == "authorization_revoked"


def test_one_flipped_byte_or_another_key_is_401_and_no_row(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers = documented(follow(), harness.now)
    flipped = bytearray(body)
    flipped[len(flipped) // 2] ^= 0x01
    signature = headers["Twitch-Eventsub-Message-Signature"]
    message_id = headers["Twitch-Eventsub-Message-Id"]
    timestamp = headers["Twitch-Eventsub-Message-Timestamp"]
    mutations = [
        (bytes(flipped), headers),
        (
            body,
            {
                **headers,
                "Twitch-Eventsub-Message-Id": flip(message_id, -1),
            },
        ),
        (
            body,
            {
                **headers,
                "Twitch-Eventsub-Message-Timestamp": timestamp.replace(".", ".1", 1)[:-2] + "Z",
            },
        ),
        (
            body,
            {
                **headers,
                "Twitch-Eventsub-Message-Signature": flip(signature),
            },
        ),
        documented(follow(), harness.now, secret="not-the-secret"),
    ]
    for mutated, mutated_headers in mutations:
        for shape, b64 in (("v1", False), ("function-url", True)):
            got = answer(harness, "twitch", mutated, mutated_headers, shape=shape, base64_body=b64)
            assert got == UNAUTHORIZED
    assert row_count(conn) == 0


@pytest.mark.parametrize(("offset", "status"), [(600, 202), (-600, 202), (601, 401), (-601, 401)])
def test_the_ten_minute_window_applies_both_ways(
    offset: int, status: int, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers = documented(follow(), harness.now - offset)
    assert answer(harness, "twitch", body, headers).status == status
    assert row_count(conn) == (1 if status == 202 else 0)


def test_the_published_vector_is_accepted_by_the_handler(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_provider(monkeypatch, "kat-twitch", "twitch", KAT_SECRET)
    monkeypatch.setattr(ingest, "current_time", lambda: float(KAT_NOW))
    headers = {
        "Twitch-Eventsub-Message-Id": KAT_ID,
        "Twitch-Eventsub-Message-Timestamp": KAT_TIMESTAMP,
        "Twitch-Eventsub-Message-Signature": KAT_SIGNATURE,
        "Twitch-Eventsub-Message-Type": "notification",
    }
    assert answer(harness, "kat-twitch", KAT_BODY, headers, shape="v1") == ACCEPTED
    (row,) = events(conn, "kat-twitch")
    assert (row["event_id"], row["event_type"]) == (KAT_ID, "channel.follow")
