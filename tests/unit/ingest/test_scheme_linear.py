"""Linear without I/O. No oracle library and no published vector exist: signatures are built here
with plain hmac from Linear's documented recipe (hex HMAC-SHA256 of the raw body, keyed with the
webhook's signing secret; ``webhookTimestamp`` in the body within 60 s), and one fixed vector
computed that way (secret ``SECRET``, as in Linear's SDK tests) guards against regressions."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery

SECRET = "SECRET"
NOW = 1_700_000_000
FIXED_BODY = (
    b'{"action":"create","type":"Issue","data":{"id":"8f8c1c9e-6b4c-4bd1-9d3e-2f1c7a0e5b11",'
    b'"title":"Known answer"},"organizationId":"org-1","webhookTimestamp":1700000000000}'
)
FIXED_SIGNATURE = "70180fbdd6bcb2922bb4f5592f0b704f6281197ec02ce7279f3ca300b678d35a"
LINEAR = schemes.Linear()


def documented(body: bytes, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"linear-signature": digest, "linear-delivery": "d-1", "linear-event": "Issue"}


def event(stamp: Any = NOW * 1000, **fields: Any) -> bytes:
    document = {"action": "update", "type": "Comment", "data": {"id": "c1", "body": "hi"}}
    return json.dumps({**document, **fields, "webhookTimestamp": stamp}).encode()


def verify(body: bytes, headers: dict[str, str] | None = None, now: int = NOW) -> schemes.Verified:
    headers = documented(body) if headers is None else headers
    return LINEAR.verify(Delivery(headers, body), [SECRET], now=now, tolerance=60)


def test_the_fixed_vector_verifies_and_is_identified() -> None:
    assert documented(FIXED_BODY)["linear-signature"] == FIXED_SIGNATURE
    headers = {"Linear-Signature": FIXED_SIGNATURE, "Linear-Delivery": "del-1"}
    verified = verify(FIXED_BODY, headers)
    assert verified.timestamp == NOW
    assert verified.payload == json.loads(FIXED_BODY)  # parsed once, for ingest
    (identity,) = LINEAR.identify(Delivery(headers, FIXED_BODY), verified.payload, verified)
    assert identity.event_type == "Issue.create"
    assert identity.delivery_id == "del-1"
    without_stamp = {k: v for k, v in json.loads(FIXED_BODY).items() if k != "webhookTimestamp"}
    canonical = json.dumps(without_stamp, sort_keys=True, separators=(",", ":")).encode()
    assert (
        identity.event_id == "sha256:" + hashlib.sha256(b"Issue.create\x00" + canonical).hexdigest()
    )


def test_we_sign_as_linear_does_stamping_the_body() -> None:
    signed = LINEAR.sign(
        SECRET, b'{"type": "Issue", "action": "remove"}', timestamp=NOW, event_id="d-9"
    )
    assert json.loads(signed.body) == {
        "type": "Issue",
        "action": "remove",
        "webhookTimestamp": NOW * 1000,
    }
    assert signed.headers["Linear-Signature"] == documented(signed.body)["linear-signature"]
    assert signed.headers["Linear-Delivery"] == "d-9"
    assert signed.headers["Linear-Event"] == "Issue"
    verify(signed.body, {k.lower(): v for k, v in signed.headers.items()})


def test_a_body_that_is_not_a_json_object_is_signed_as_it_is() -> None:
    signed = LINEAR.sign(SECRET, b"not json", timestamp=NOW)
    assert signed.body == b"not json"
    with pytest.raises(InvalidPayload):  # authentic, but not an event: 400
        verify(signed.body, {k.lower(): v for k, v in signed.headers.items()})


@pytest.mark.parametrize(
    ("offset_ms", "fresh"),
    [(60_000, True), (-60_000, True), (60_001, False), (-60_001, False), (0, True)],
)
def test_webhook_timestamp_is_held_to_60_seconds_both_ways(offset_ms: int, fresh: bool) -> None:
    body = event(NOW * 1000 + offset_ms)
    if fresh:
        verify(body)
    else:
        with pytest.raises(AuthenticationFailed) as info:
            verify(body)
        assert info.value.reason == "stale"


@pytest.mark.parametrize("stamp", [None, True, 1.7e12, "1700000000000", -1, 10**16])
def test_a_signed_body_without_a_usable_webhook_timestamp_is_refused(stamp: Any) -> None:
    body = event(stamp) if stamp is not None else b'{"type":"Issue","action":"create"}'
    with pytest.raises(AuthenticationFailed):
        verify(body)


@pytest.mark.parametrize(
    "signature",
    ["", "sha256=" + "0" * 64, "0" * 63, "g" * 64, FIXED_SIGNATURE + "0"],
)
def test_malformed_signatures_fail_authentication(signature: str) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(FIXED_BODY, {"linear-signature": signature})
    with pytest.raises(AuthenticationFailed):
        verify(FIXED_BODY, {})


def test_a_wrong_secret_or_an_altered_body_is_a_mismatch() -> None:
    with pytest.raises(SignatureMismatch):
        verify(FIXED_BODY, documented(FIXED_BODY, "other"))
    restamped = FIXED_BODY.replace(b"1700000000000", b"1700000001000")
    with pytest.raises(SignatureMismatch):
        verify(restamped, documented(FIXED_BODY))


def test_a_retry_with_a_fresh_timestamp_has_the_same_key_and_other_events_do_not() -> None:
    def key(body: bytes) -> str:
        verified = verify(body, now=json.loads(body)["webhookTimestamp"] // 1000)
        (identity,) = LINEAR.identify(Delivery({}, body), verified.payload, verified)
        return identity.event_id

    first = key(event(NOW * 1000))
    retry = json.dumps(json.loads(event(NOW * 1000 + 3_600_000)), indent=2).encode()
    assert key(retry) == first  # one hour later, re-spaced: the same event
    assert key(event(NOW * 1000, action="remove")) != first
    assert key(event(NOW * 1000, data={"id": "c2", "body": "hi"})) != first


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "Issue"},
        {"action": "create"},
        {"type": "", "action": "x"},
        {"type": 1, "action": []},
    ],
)
def test_identify_needs_a_type_and_an_action(payload: dict[str, Any]) -> None:
    with pytest.raises(InvalidPayload):
        LINEAR.identify(Delivery({}, b""), payload, schemes.Verified())


def test_new_events_are_acknowledged_with_200() -> None:
    assert LINEAR.acknowledge({}, new=True) == schemes.Reply('{"status":"accepted"}', 200)
    assert LINEAR.acknowledge({}, new=False) is None
    assert LINEAR.default_tolerance_s == 60
