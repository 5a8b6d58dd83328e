"""Twitch EventSub without I/O. No oracle library for Python: the tests use the published
known-answer vector (twitch_api's ``verify_request`` test) and build other signatures with plain
hmac from Twitch's documented recipe (``sha256=`` + hex HMAC-SHA256 of message id + timestamp +
raw body, keyed with the subscription's secret)."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery
from webhook_inbox.ingest.schemes.twitch import rfc3339, rfc3339_nanos

# twitch-rs/twitch_api, src/eventsub/mod.rs, test verify_request.
KAT_SECRET = "secretabcd"
KAT_ID = "ae2ff348-e102-16be-a3eb-6830c1bf38d2"
KAT_TIMESTAMP = "2021-02-19T23:47:00.8091512Z"
KAT_SIGNATURE = "sha256=d10f5bd9474b7ac7bd7105eb79c2d52768b4d0cd2a135982c3bf5a1d59a78823"
KAT_BODY = (
    b'{"subscription":{"id":"ae2ff348-e102-16be-a3eb-6830c1bf38d2","status":"enabled",'
    b'"type":"channel.follow","version":"1","condition":{"broadcaster_user_id":"44429626"},'
    b'"transport":{"method":"webhook","callback":"null"},"created_at":"2021-02-19T23:47:00.7621315Z"},'
    b'"event":{"user_id":"28408015","user_login":"testFromUser","user_name":"testFromUser",'
    b'"broadcaster_user_id":"44429626","broadcaster_user_login":"44429626",'
    b'"broadcaster_user_name":"testBroadcaster"}}'
)
KAT_NOW = 1613778420  # 2021-02-19T23:47:00Z
TWITCH = schemes.Twitch()
SUBSCRIPTION = {"id": "sub-1", "status": "enabled", "type": "channel.follow", "version": "2"}


def documented(
    body: bytes,
    timestamp: str,
    message_id: str = "msg-1",
    kind: str = "notification",
    secret: str = KAT_SECRET,
) -> dict[str, str]:
    digest = hmac.new(secret.encode(), (message_id + timestamp).encode() + body, hashlib.sha256)
    return {
        "twitch-eventsub-message-id": message_id,
        "twitch-eventsub-message-timestamp": timestamp,
        "twitch-eventsub-message-signature": "sha256=" + digest.hexdigest(),
        "twitch-eventsub-message-type": kind,
    }


def verify(headers: dict[str, str], body: bytes, now: int = KAT_NOW) -> schemes.Verified:
    return TWITCH.verify(Delivery(headers, body), [KAT_SECRET], now=now, tolerance=600)


def test_the_published_vector_verifies_and_keys_by_the_signed_message_id() -> None:
    assert len(KAT_BODY) == 458
    headers = {
        "Twitch-Eventsub-Message-Id": KAT_ID,
        "Twitch-Eventsub-Message-Timestamp": KAT_TIMESTAMP,
        "Twitch-Eventsub-Message-Signature": KAT_SIGNATURE,
        "Twitch-Eventsub-Message-Type": "notification",
        "Twitch-Eventsub-Message-Retry": "0",
    }
    verified = verify(headers, KAT_BODY)
    assert (verified.signed_id, verified.timestamp) == (KAT_ID, KAT_NOW + 1)  # .809 s: rounded up
    (identity,) = TWITCH.identify(Delivery(headers, KAT_BODY), json.loads(KAT_BODY), verified)
    assert identity == schemes.Identity(KAT_ID, "channel.follow")
    assert (
        documented(KAT_BODY, KAT_TIMESTAMP, KAT_ID)["twitch-eventsub-message-signature"]
        == KAT_SIGNATURE
    )


def test_our_signature_is_the_documented_recipe() -> None:
    body = json.dumps({"subscription": SUBSCRIPTION, "event": {"user_id": "1"}}).encode()
    signed = TWITCH.sign(KAT_SECRET, body, timestamp=KAT_NOW, event_id="m-7")
    headers = {k.lower(): v for k, v in signed.headers.items()}
    assert headers["twitch-eventsub-message-timestamp"] == "2021-02-19T23:47:00.000000000Z"
    expected = documented(body, headers["twitch-eventsub-message-timestamp"], "m-7")
    assert (
        headers["twitch-eventsub-message-signature"]
        == expected["twitch-eventsub-message-signature"]
    )
    assert headers["twitch-eventsub-message-type"] == "notification"
    assert headers["twitch-eventsub-subscription-type"] == "channel.follow"
    assert headers["twitch-eventsub-subscription-version"] == "2"
    assert verify(headers, body).signed_id == "m-7"


def test_sign_names_the_message_type_the_body_shows() -> None:
    def kind(document: dict[str, Any]) -> str:
        signed = TWITCH.sign(KAT_SECRET, json.dumps(document).encode(), timestamp=KAT_NOW)
        return signed.headers["Twitch-Eventsub-Message-Type"]

    assert kind({"challenge": "c", "subscription": SUBSCRIPTION}) == "webhook_callback_verification"
    assert (
        kind({"subscription": SUBSCRIPTION | {"status": "authorization_revoked"}}) == "revocation"
    )
    assert kind({"subscription": SUBSCRIPTION, "event": {}}) == "notification"


def test_an_authentic_challenge_is_answered_with_its_raw_text() -> None:
    body = json.dumps(
        {"challenge": "pogchamp-kappa-360noscope-vohiyo", "subscription": SUBSCRIPTION}
    ).encode()
    headers = documented(body, KAT_TIMESTAMP, kind="webhook_callback_verification")
    verified = verify(headers, body)
    reply = TWITCH.identify(Delivery(headers, body), json.loads(body), verified)
    assert reply == schemes.Reply("pogchamp-kappa-360noscope-vohiyo", 200, "text/plain")


def test_a_revocation_is_an_event_of_its_own_type() -> None:
    body = json.dumps({"subscription": SUBSCRIPTION | {"status": "user_removed"}}).encode()
    headers = documented(body, KAT_TIMESTAMP, message_id="rev-1", kind="revocation")
    verified = verify(headers, body)
    (identity,) = TWITCH.identify(Delivery(headers, body), json.loads(body), verified)
    assert identity == schemes.Identity("rev-1", "revocation")


@pytest.mark.parametrize(
    ("kind", "document"),
    [
        # The type header is not signed: it must agree with the (signed) body.
        ("notification", {"challenge": "c", "subscription": SUBSCRIPTION}),
        ("revocation", {"challenge": "c", "subscription": SUBSCRIPTION}),
        ("webhook_callback_verification", {"subscription": SUBSCRIPTION, "event": {}}),
        ("revocation", {"subscription": SUBSCRIPTION, "event": {}}),
        ("notification", {"subscription": SUBSCRIPTION}),
        ("other", {"subscription": SUBSCRIPTION, "event": {}}),
        ("notification", {"subscription": "x", "event": {}}),
        ("notification", {"subscription": SUBSCRIPTION, "event": []}),
        ("notification", {"subscription": {"type": ""}, "event": {}}),
        ("webhook_callback_verification", {"subscription": SUBSCRIPTION, "challenge": 5}),
        ("webhook_callback_verification", {"subscription": SUBSCRIPTION, "challenge": "c" * 1025}),
    ],
)
def test_a_body_of_another_kind_than_the_type_header_says_is_400(
    kind: str, document: dict[str, Any]
) -> None:
    headers = {"twitch-eventsub-message-type": kind}
    with pytest.raises(InvalidPayload):
        TWITCH.identify(Delivery(headers, b""), document, schemes.Verified(signed_id="m"))
    with pytest.raises(InvalidPayload):
        TWITCH.identify(Delivery({}, b""), document, schemes.Verified(signed_id="m"))


@pytest.mark.parametrize(
    ("timestamp", "fresh"),
    [
        ("2021-02-19T23:57:00Z", True),  # exactly +600 s
        ("2021-02-19T23:57:00.000000001Z", False),  # one nanosecond beyond
        ("2021-02-19T23:37:00.000Z", True),  # exactly -600 s
        ("2021-02-19T23:36:59.999999999Z", False),
        ("2021-02-20T00:56:00+01:00", True),  # +540 s, written with an offset
        ("2021-02-19T23:47:00.8091512-00:10", False),  # 23:57:00.809Z: +600.809 s
    ],
)
def test_the_ten_minute_window_applies_both_ways_to_the_nanosecond(
    timestamp: str, fresh: bool
) -> None:
    body = json.dumps({"subscription": SUBSCRIPTION, "event": {}}).encode()
    headers = documented(body, timestamp)
    if fresh:
        verify(headers, body)
    else:
        with pytest.raises(AuthenticationFailed) as info:
            verify(headers, body)
        assert info.value.reason == "stale"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2021-02-19T23:47:00Z", datetime(2021, 2, 19, 23, 47, tzinfo=UTC)),
        ("2021-02-19T23:47:00.8091512Z", datetime(2021, 2, 19, 23, 47, 0, 809151, tzinfo=UTC)),
        ("2021-02-19T23:47:00.5+05:30", datetime(2021, 2, 19, 18, 17, 0, 500000, tzinfo=UTC)),
        ("2024-02-29T00:00:00-23:59", datetime(2024, 2, 29, 23, 59, tzinfo=UTC)),
        ("1970-01-01T00:00:00.000000001Z", datetime(1970, 1, 1, tzinfo=UTC)),
    ],
)
def test_the_rfc3339_parser_reads_what_twitch_writes(text: str, expected: datetime) -> None:
    nanos = rfc3339_nanos(text)
    assert nanos // 1000 == int(expected.timestamp()) * 1_000_000 + expected.microsecond


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2021-02-19T23:47:00",  # no zone
        "2021-02-19 23:47:00Z",  # space for T
        "2021-02-19t23:47:00z",
        "2021-W07-5T23:47:00Z",
        "2021-02-19T23:47:00.Z",
        "2021-02-19T23:47:00.1234567890Z",  # ten fractional digits
        "2021-02-19T23:47:60Z",  # leap second
        "2021-02-29T00:00:00Z",
        "2021-13-01T00:00:00Z",
        "0000-01-01T00:00:00Z",
        "2021-02-19T24:00:00Z",
        "2021-02-19T23:47:00+24:00",
        "2021-02-19T23:47:00+01:60",
        "2021-02-19T23:47:00+0100",
        "١٢٣٤-02-19T23:47:00Z",  # non-ASCII digits
        " 2021-02-19T23:47:00Z",
        "1613778420",
    ],
)
def test_the_rfc3339_parser_refuses_everything_else(text: str) -> None:
    with pytest.raises(AuthenticationFailed):
        rfc3339_nanos(text)


def test_our_timestamps_parse_back() -> None:
    assert rfc3339_nanos(rfc3339(KAT_NOW)) == KAT_NOW * 10**9


def test_moving_characters_between_id_and_timestamp_breaks_verification() -> None:
    # id + timestamp + body has no separators; the strict timestamp keeps the split unique.
    base = documented(KAT_BODY, KAT_TIMESTAMP, KAT_ID)
    signature = base["twitch-eventsub-message-signature"]
    for moved_id, moved_timestamp in [
        (KAT_ID + "2", KAT_TIMESTAMP[1:]),
        (KAT_ID[:-1], KAT_ID[-1] + KAT_TIMESTAMP),
        (KAT_ID, KAT_TIMESTAMP + KAT_BODY[:1].decode()),
    ]:
        headers = base | {
            "twitch-eventsub-message-id": moved_id,
            "twitch-eventsub-message-timestamp": moved_timestamp,
            "twitch-eventsub-message-signature": signature,
        }
        with pytest.raises(AuthenticationFailed):
            verify(headers, KAT_BODY[1:] if moved_timestamp.endswith("{") else KAT_BODY)


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "d10f5bd9474b7ac7bd7105eb79c2d52768b4d0cd2a135982c3bf5a1d59a78823",
        "SHA256=" + "0" * 64,
        "sha256=" + "0" * 63,
        "sha256=" + "g" * 64,
        "sha256 =" + "0" * 64,
    ],
)
def test_malformed_signatures_fail_authentication(signature: str) -> None:
    headers = documented(KAT_BODY, KAT_TIMESTAMP, KAT_ID) | {
        "twitch-eventsub-message-signature": signature
    }
    with pytest.raises(AuthenticationFailed):
        verify(headers, KAT_BODY)


def test_a_wrong_secret_is_a_mismatch() -> None:
    headers = documented(KAT_BODY, KAT_TIMESTAMP, KAT_ID, secret="secretabce")
    with pytest.raises(SignatureMismatch):
        verify(headers, KAT_BODY)
    assert TWITCH.default_tolerance_s == 600
    assert TWITCH.acknowledge({}, new=True) is None  # any 2xx will do: ingest's 202
