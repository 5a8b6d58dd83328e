"""Paddle without I/O: the SDK's published vectors, its verifier as the oracle both ways, the
documented 5-second default in both directions, rotation, the signed event id, the 200."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from paddle_billing.Notifications import Secret, Verifier

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.providers import parse_config
from webhook_inbox.ingest.schemes import Delivery, Verified

# paddle-python-sdk tests/Unit/Notification/test_Verifier.py (+ _fixtures/standard_payload.json)
SECRET = "pdl_ntfset_01hs0t3tw21j988db1pam5xg8m_GrOWLNef+vmtjJYq4mSnHNzvc8uWoJ1I"
TS = 1710498758
H1 = "558bf93944dbeb4790c7a8af6cb2ea435c8ca9c8396aafc1a4e37424ac132744"
BODY = (
    b'{"data":{"id":"ctm_01hs0tqf76sxmp7ba5e4mw1sc8","name":"John Doe",'
    b'"email":"blackhole+verification2@paddle.com","locale":"en","status":"active",'
    b'"created_at":"2024-03-15T10:32:37.862Z","updated_at":"2024-03-15T10:32:37.862Z",'
    b'"custom_data":null,"import_meta":null,"marketing_consent":false},'
    b'"event_id":"evt_01hs0tqfme2xwb2hvwv87p8y3w","event_type":"customer.created",'
    b'"occurred_at":"2024-03-15T10:32:38.286848Z","notification_id":"ntf_01hs0tqfrhgkyp39x4wyvy7h6n"}'
)
ROTATION_SECRET = "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_WvRO0eL4Bj9rgYYIBZY6wZhG4EHy9jzh"
ROTATION_HEADER = (
    "ts=1696195954;h1=dummy;h1=d96299976a6eb066f484d7fde011ac56fc32b38fc9940bc419d6e537fdc6ef02"
)

PADDLE = schemes.Paddle()


def verify(
    header: str, body: bytes = BODY, *, secrets: list[str] | None = None, now: int = TS
) -> Verified:
    delivery = Delivery({"Paddle-Signature": header}, body)
    return PADDLE.verify(delivery, secrets or [SECRET], now=now, tolerance=5)


class Request:
    """The request shape Paddle's Verifier reads."""

    def __init__(self, headers: dict[str, str], body: bytes) -> None:
        self.headers, self.body = headers, body


def test_paddle_published_vector_signs_and_verifies() -> None:
    assert PADDLE.sign(SECRET, BODY, timestamp=TS).headers == {
        "Paddle-Signature": f"ts={TS};h1={H1}"
    }
    assert verify(f"ts={TS};h1={H1}").timestamp == TS


def test_paddle_published_rotation_vector_matches_the_second_h1() -> None:
    body = b"hello-world"
    # "dummy" is no hex digest: strictly decoded, it fails the header; the SDK skips it.
    with pytest.raises(AuthenticationFailed):
        verify(ROTATION_HEADER, body, secrets=[ROTATION_SECRET], now=1696195954)
    header = ROTATION_HEADER.replace("h1=dummy", "h1=" + "0" * 64)
    verified = verify(header, body, secrets=[ROTATION_SECRET], now=1696195954)
    assert verified.secret == ROTATION_SECRET
    for wrong in (
        "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_TjIG2BXbm83HPXqNfziwe506sBEdqL/4",
        "pdl_ntf_01hbpjmytsa32fhr36nqgc3kgb_vB/yIOnTOCWIvpBadM5jzBZPHc7OmdSo",
    ):
        with pytest.raises(AuthenticationFailed):
            verify(header, body, secrets=[wrong], now=1696195954)


def test_paddle_verifier_and_ours_agree_both_ways() -> None:
    body = b'{"event_id":"evt_1","event_type":"transaction.paid","data":{}}'
    now = int(time.time())  # the SDK's 5-second window runs on the real clock
    ours = PADDLE.sign(SECRET, body, timestamp=now).headers
    assert Verifier().verify(Request(ours, body), Secret(SECRET)) is True
    # Paddle signs with every secret of a rotation, one h1 each; any one verifies.
    h1 = ours["Paddle-Signature"].rpartition("h1=")[2]
    theirs = f"ts={now};h1={'a' * 64};h1={h1}"
    secrets = [Secret("pdl_ntfset_other"), Secret(SECRET)]
    assert Verifier().verify(Request({"Paddle-Signature": theirs}, body), secrets) is True
    verify(theirs, body, now=now)


@pytest.mark.parametrize("skew", [-5, 5])
def test_paddle_default_tolerance_is_five_seconds_both_ways(skew: int) -> None:
    provider = parse_config(
        {"providers": {"p": {"scheme": "paddle", "secrets": [{"value": SECRET}]}}}
    )["p"]
    assert provider.tolerance_seconds == 5
    header = PADDLE.sign(SECRET, BODY, timestamp=TS + skew).headers["Paddle-Signature"]
    verify(header)
    beyond = TS + skew + (1 if skew > 0 else -1)
    late = PADDLE.sign(SECRET, BODY, timestamp=beyond).headers["Paddle-Signature"]
    with pytest.raises(AuthenticationFailed) as failure:
        verify(late)
    assert failure.value.reason == "stale"


@pytest.mark.parametrize(
    "header",
    [
        "",
        f"ts={TS}",  # no h1
        f"h1={H1}",  # no ts
        f"ts={TS};ts={TS};h1={H1}",
        f"ts={TS};h1={H1[:-1]}",
        f"ts={TS};h1={H1}0",
        f"ts={TS}; h1={H1}",  # no whitespace in Paddle's format
        f"ts={TS};{H1}",
        f"ts=1e9;h1={H1}",
        f"ts={TS};h1={H1.replace('5', '6', 1)}",
        ";".join([f"ts={TS}", *[f"h1={H1}"] * 18]),
    ],
)
def test_paddle_rejects_malformed_and_wrong_signatures(header: str) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(header)


def test_paddle_ignores_unknown_header_items_but_still_needs_a_matching_h1() -> None:
    verify(f"ts={TS};h2=future;h1={H1}")
    with pytest.raises(AuthenticationFailed):
        verify(f"ts={TS};h2={H1}")
    with pytest.raises(AuthenticationFailed):
        verify(f"ts={TS};h1={H1}", BODY.replace(b"John", b"Jane"))


def test_paddle_identity_is_the_signed_event_and_the_notification() -> None:
    (found,) = PADDLE.identify(Delivery({}, BODY), json.loads(BODY), Verified())
    assert (found.event_id, found.event_type, found.delivery_id) == (
        "evt_01hs0tqfme2xwb2hvwv87p8y3w",
        "customer.created",
        "ntf_01hs0tqfrhgkyp39x4wyvy7h6n",
    )


@pytest.mark.parametrize(
    "payload",
    [
        {"event_type": "customer.created"},
        {"event_id": "evt_1"},
        {"event_id": "evt_1", "event_type": "x", "notification_id": ""},
        {"event_id": "evt_1", "event_type": "x", "notification_id": "n" * 256},
    ],
)
def test_paddle_missing_or_oversized_identity_is_a_400(payload: dict[str, Any]) -> None:
    with pytest.raises(InvalidPayload):
        PADDLE.identify(Delivery({}, b""), payload, Verified())


def test_paddle_is_acknowledged_with_200_as_it_documents() -> None:
    reply = PADDLE.acknowledge({}, new=True)
    assert reply is not None
    assert (reply.status, json.loads(reply.body)) == (200, {"status": "accepted"})
    assert PADDLE.acknowledge({}, new=False) is None  # ingest's duplicate answer is a 200
