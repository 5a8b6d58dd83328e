"""Mailgun without I/O. No oracle library exists: the tests build signatures with plain
hmac/hashlib from Mailgun's documented recipe (hex HMAC-SHA256 of timestamp + token, keyed with
the signing key) and check the published vector from Symfony's Mailgun bridge tests."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery

# Symfony Mailer's Mailgun bridge, Tests/Webhook/Fixtures/delivered_messages.json.
KAT_KEY = "key-0p6mqbf74lb20gzq9f4dhpn9rg3zyk26"
KAT_TIMESTAMP = 1661621787
KAT_TOKEN = "d1931d9645b65e60f6fddf94448e982ff8db9256144a7fcb15"
KAT_SIGNATURE = "1aed11dcc25700d6b75f9a6d568343ea02ecdd3fc89cc3209e2883a19e5cdd50"
KAT_BODY = json.dumps(
    {
        "signature": {
            "token": KAT_TOKEN,
            "timestamp": str(KAT_TIMESTAMP),
            "signature": KAT_SIGNATURE,
        },
        "event-data": {"id": "CPgfbmQMTCKtHW6uIWtuVe", "event": "delivered", "log-level": "info"},
    },
    indent=4,
).encode()

KEY = "mailgun-unit-signing-key"
NOW = 1_700_000_000
MAILGUN = schemes.Mailgun()


def documented_signature(key: str, timestamp: str, token: str) -> str:
    return hmac.new(key.encode(), (timestamp + token).encode(), hashlib.sha256).hexdigest()


def mailgun_body(
    key: str = KEY,
    *,
    timestamp: Any = str(NOW),
    token: str = "a" * 50,
    event_data: dict[str, Any] | None = None,
    **signature_fields: Any,
) -> bytes:
    signature = {
        "token": token,
        "timestamp": timestamp,
        "signature": documented_signature(key, str(timestamp), token),
        **signature_fields,
    }
    data = event_data or {"id": "evt-data-1", "event": "opened", "recipient": "a@example.com"}
    return json.dumps({"signature": signature, "event-data": data}).encode()


def verify(body: bytes, keys: list[str] | None = None, now: int = NOW) -> schemes.Verified:
    return MAILGUN.verify(Delivery({}, body), keys or [KEY], now=now, tolerance=300)


def test_the_published_vector_verifies_and_keys_by_its_token() -> None:
    verified = MAILGUN.verify(Delivery({}, KAT_BODY), [KAT_KEY], now=KAT_TIMESTAMP, tolerance=300)
    assert verified.signed_id == KAT_TOKEN
    assert verified.payload == json.loads(KAT_BODY)  # parsed once, here, for ingest
    (identity,) = MAILGUN.identify(Delivery({}, KAT_BODY), verified.payload, verified)
    assert identity == schemes.Identity(KAT_TOKEN, "delivered", "CPgfbmQMTCKtHW6uIWtuVe")


def test_signing_reproduces_the_published_vector() -> None:
    signed = MAILGUN.sign(
        KAT_KEY, b'{"event":"delivered"}', timestamp=KAT_TIMESTAMP, event_id=KAT_TOKEN
    )
    signature = json.loads(signed.body)["signature"]
    assert signature == {
        "token": KAT_TOKEN,
        "timestamp": str(KAT_TIMESTAMP),
        "signature": KAT_SIGNATURE,
    }


def test_our_signature_is_the_documented_recipe() -> None:
    event_data = b'{"id":"x1", "event":"clicked"}'
    signed = MAILGUN.sign(KEY, event_data, timestamp=NOW)
    document = json.loads(signed.body)
    signature = document["signature"]
    assert len(signature["token"]) == 50
    assert signature["signature"] == documented_signature(
        KEY, signature["timestamp"], signature["token"]
    )
    # The event-data is carried byte for byte, and the whole body verifies.
    assert signed.body.endswith(b'"event-data":' + event_data + b"}")
    assert verify(signed.body).signed_id == signature["token"]


def test_signing_a_whole_mailgun_body_replaces_its_signature() -> None:
    signed = MAILGUN.sign(KEY, KAT_BODY, timestamp=NOW, event_id="t" * 50)
    document = json.loads(signed.body)
    assert document["event-data"] == json.loads(KAT_BODY)["event-data"]
    assert verify(signed.body).signed_id == "t" * 50


def test_a_documented_signature_made_here_verifies() -> None:
    assert verify(mailgun_body()).timestamp == NOW
    assert verify(mailgun_body(timestamp=NOW)).timestamp == NOW  # the documented int form


def test_a_parent_signature_made_with_the_primary_key_verifies() -> None:
    token = "p" * 50
    parent = documented_signature("primary-key", str(NOW), token)
    body = mailgun_body("subaccount-key", token=token, **{"parent-signature": parent})
    assert verify(body, ["primary-key"]).secret == "primary-key"
    assert verify(body, ["subaccount-key"]).secret == "subaccount-key"
    with pytest.raises(SignatureMismatch):
        verify(body, ["another-key"])


def test_the_event_data_is_not_covered_by_the_signature() -> None:
    # Mailgun's weaker guarantee, stated as a test: other event-data under the same signature
    # object verifies. Ingest keys the row by the token, so it can only ever be a duplicate.
    forged = mailgun_body(event_data={"id": "forged", "event": "delivered"})
    verified = verify(forged)
    (identity,) = MAILGUN.identify(Delivery({}, forged), verified.payload, verified)
    assert identity.event_id == verify(mailgun_body()).signed_id == "a" * 50


@pytest.mark.parametrize(
    "change",
    ["token", "timestamp", "signature", "key"],
)
def test_any_change_to_what_is_signed_fails(change: str) -> None:
    document = json.loads(mailgun_body())
    signature = document["signature"]
    keys = [KEY]
    if change == "token":
        signature["token"] = "b" + signature["token"][1:]
    elif change == "timestamp":
        signature["timestamp"] = str(NOW - 1)
    elif change == "signature":
        signature["signature"] = signature["signature"][:-1] + (
            "0" if signature["signature"][-1] != "0" else "1"
        )
    else:
        keys = [KEY + "x"]
    with pytest.raises(SignatureMismatch):
        verify(json.dumps(document).encode(), keys)


def test_moving_a_digit_between_timestamp_and_token_is_refused_as_stale() -> None:
    # timestamp + token has no separator: "1700000000" + "0abc…" signs like "170000000" +
    # "00abc…". The MAC survives the move, the tolerance does not.
    token = "0" + "c" * 49
    original = json.loads(mailgun_body(token=token))
    moved = original["signature"] | {"timestamp": str(NOW) + "0", "token": token[1:]}
    with pytest.raises(AuthenticationFailed) as info:
        verify(json.dumps({**original, "signature": moved}).encode())
    assert info.value.reason == "stale"
    shortened = original["signature"] | {"timestamp": str(NOW)[:-1], "token": "0" + token}
    with pytest.raises(AuthenticationFailed) as info:
        verify(json.dumps({**original, "signature": shortened}).encode())
    assert info.value.reason == "stale"


@pytest.mark.parametrize(
    ("offset", "fresh"), [(300, True), (-300, True), (301, False), (-301, False)]
)
def test_tolerance_applies_both_ways(offset: int, fresh: bool) -> None:
    body = mailgun_body(timestamp=str(NOW - offset))
    if fresh:
        verify(body)
    else:
        with pytest.raises(AuthenticationFailed) as info:
            verify(body)
        assert info.value.reason == "stale"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"event-data":{}}',
        b'{"signature":"x"}',
        json.dumps({"signature": {"token": "a" * 50, "timestamp": str(NOW)}}).encode(),
        mailgun_body(timestamp=float(NOW)),
        mailgun_body(timestamp=True),
        mailgun_body(timestamp=" 1700000000"),
        mailgun_body(token=""),
        mailgun_body(token="a b"),
        mailgun_body(token="x" * 256),
        mailgun_body(**{"parent-signature": None}),
        mailgun_body(**{"parent-signature": "zz"}),
        b"token=x&timestamp=1&signature=00",  # a form post (legacy webhooks, routes)
    ],
)
def test_malformed_signature_material_fails_authentication(body: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(body)


def test_identify_needs_event_data_with_an_event() -> None:
    for event_data in (None, "x", {"id": "1"}, {"event": ""}, {"event": 7.5}):
        payload = {"signature": {}, "event-data": event_data}
        with pytest.raises(InvalidPayload):
            MAILGUN.identify(Delivery({}, b""), payload, schemes.Verified(signed_id="t"))
    identity = MAILGUN.identify(
        Delivery({}, b""), {"event-data": {"event": "failed", "id": 5}}, schemes.Verified("t")
    )
    assert identity == [schemes.Identity("t", "failed", None)]  # a non-string id is dropped


def test_new_events_are_acknowledged_with_200() -> None:
    assert MAILGUN.acknowledge({}, new=True) == schemes.Reply('{"status":"accepted"}', 200)
    assert MAILGUN.acknowledge({}, new=False) is None  # ingest's duplicate answer is a 200
