"""Zoom without I/O. No oracle library and no published vector with fixed values exist: the tests
build signatures with plain hmac from Zoom's documented recipe (``v0=`` + hex HMAC-SHA256 of
``v0:{x-zm-request-timestamp}:{raw body}``, keyed with the app's secret token) and the
url_validation answer the same way (hex HMAC-SHA256 of ``plainToken``)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery

SECRET = "zoom-unit-secret-token"
NOW = 1_658_940_994
ZOOM = schemes.Zoom()
STARTED = (
    b'{"event":"meeting.started","event_ts":1658940994000,'
    b'"payload":{"account_id":"a1","object":{"id":"9"}}}'
)
# The shape Zoom documents for its challenge (the example token from Zoom's docs).
VALIDATION = (
    b'{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,'
    b'"event":"endpoint.url_validation"}'
)


def documented(body: bytes, timestamp: int = NOW, secret: str = SECRET) -> dict[str, str]:
    message = f"v0:{timestamp}:".encode() + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return {"x-zm-signature": f"v0={digest}", "x-zm-request-timestamp": str(timestamp)}


def verify(
    body: bytes, headers: dict[str, str], secrets: list[str] | None = None
) -> schemes.Verified:
    return ZOOM.verify(Delivery(headers, body), secrets or [SECRET], now=NOW, tolerance=300)


def test_a_documented_signature_verifies_and_ours_is_the_documented_one() -> None:
    verify(STARTED, documented(STARTED))
    signed = ZOOM.sign(SECRET, STARTED, timestamp=NOW)
    assert {k.lower(): v for k, v in signed.headers.items()} == documented(STARTED)


def test_an_event_is_keyed_by_the_body_digest_with_its_type() -> None:
    headers = documented(STARTED) | {"x-zm-trackingid": "v=2.0;clid=aw1;rid=123"}
    verified = verify(STARTED, headers)
    (identity,) = ZOOM.identify(Delivery(headers, STARTED), json.loads(STARTED), verified)
    assert identity.event_type == "meeting.started"
    assert (
        identity.event_id
        == "sha256:" + hashlib.sha256(b"meeting.started\x00" + STARTED).hexdigest()
    )
    assert identity.delivery_id == "v=2.0;clid=aw1;rid=123"


def test_an_authentic_url_validation_is_answered_with_the_matching_secret() -> None:
    headers = documented(VALIDATION, secret="second")
    verified = verify(VALIDATION, headers, ["first", "second"])  # rotation: the second matches
    reply = ZOOM.identify(Delivery(headers, VALIDATION), json.loads(VALIDATION), verified)
    expected = hmac.new(b"second", b"qgg8vlvZRS6UYooatFL8Aw", hashlib.sha256).hexdigest()
    assert reply == schemes.Reply.json(
        {"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": expected}
    )
    assert reply.status == 200
    assert reply.content_type == "application/json"


def test_url_validation_is_never_answered_without_a_verified_secret() -> None:
    # The scheme's own guard; ingest reaches identify only after verify (tested end to end).
    with pytest.raises(AuthenticationFailed):
        ZOOM.identify(Delivery({}, VALIDATION), json.loads(VALIDATION), schemes.Verified())
    with pytest.raises(AuthenticationFailed):
        verify(VALIDATION, {})
    with pytest.raises(SignatureMismatch):
        verify(VALIDATION, documented(VALIDATION, secret="attacker"))


@pytest.mark.parametrize(
    "inner",
    [None, "x", {}, {"plainToken": ""}, {"plainToken": 42}, {"plainToken": "t" * 257}],
)
def test_a_url_validation_without_a_usable_plain_token_is_400(inner: Any) -> None:
    payload = {"event": "endpoint.url_validation", "payload": inner}
    with pytest.raises(InvalidPayload):
        ZOOM.identify(Delivery({}, b""), payload, schemes.Verified(secret=SECRET))


@pytest.mark.parametrize(
    ("offset", "fresh"), [(300, True), (-300, True), (301, False), (-301, False)]
)
def test_tolerance_applies_both_ways(offset: int, fresh: bool) -> None:
    headers = documented(STARTED, timestamp=NOW - offset)
    if fresh:
        verify(STARTED, headers)
    else:
        with pytest.raises(AuthenticationFailed) as info:
            verify(STARTED, headers)
        assert info.value.reason == "stale"


@pytest.mark.parametrize(
    "signature",
    ["", "v0=", "v1=" + "0" * 64, "0" * 64, "v0=" + "0" * 63, "v0=" + "g" * 64],
)
def test_malformed_signatures_fail_authentication(signature: str) -> None:
    headers = documented(STARTED) | {"x-zm-signature": signature}
    with pytest.raises(AuthenticationFailed):
        verify(STARTED, headers)


def test_new_events_are_acknowledged_with_200() -> None:
    assert ZOOM.acknowledge({}, new=True) == schemes.Reply('{"status":"accepted"}', 200)
    assert ZOOM.acknowledge({}, new=False) is None
