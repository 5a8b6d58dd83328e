"""Square without I/O: the SDK's published vectors, its webhooks helper as the oracle both ways,
strict decoding, the signed event id."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from square.utils.webhooks_helper import verify_signature

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery, Verified

# square-python-sdk tests/integration/test_webhooks_helper.py
KEY = "Ibxx_5AKakO-3qeNVR61Dw"
URL = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
BODY = (
    b'{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification",'
    b'"event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f",'
    b'"created_at":"2022-07-13T20:30:59.037339943Z",'
    b'"data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}'
)
SIGNATURE = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="

SQUARE = schemes.Square()


def verify(body: bytes, url: str, signature: str, key: str = KEY) -> Verified:
    delivery = Delivery({"x-square-hmacsha256-signature": signature}, body, url=url)
    return SQUARE.verify(delivery, [key], now=0, tolerance=300)


@pytest.mark.parametrize(
    ("key", "url", "body", "signature"),
    [
        (KEY, URL, BODY, SIGNATURE),
        (
            "signature-key",
            "https://webhook.site/webhooks",
            b'{"data":{"type":"webhooks","id":">id<"}}',
            "Cxt7+aTi4rKgcA0bC4g9EHdVtLSDWdqccmL5MvihU4U=",
        ),
    ],
)
def test_square_published_vectors_sign_and_verify(
    key: str, url: str, body: bytes, signature: str
) -> None:
    signed = SQUARE.sign(key, body, timestamp=0, url=url)
    assert signed.headers == {"x-square-hmacsha256-signature": signature}
    assert signed.url == url
    verify(body, url, signature, key)


@given(
    body=st.text(max_size=80).map(str.encode),
    url=st.sampled_from([URL, "https://hooks.example.com/in/square?tenant=a%20b", "http://h:1/p"]),
)
def test_square_helper_and_ours_agree_both_ways(body: bytes, url: str) -> None:
    ours = SQUARE.sign(KEY, body, timestamp=0, url=url).headers["x-square-hmacsha256-signature"]
    if body:  # the helper refuses an empty body outright
        assert verify_signature(
            request_body=body.decode(),
            signature_header=ours,
            signature_key=KEY,
            notification_url=url,
        )
    verify(body, url, ours)


def test_square_identity_is_the_signed_event_id_and_type() -> None:
    delivery = Delivery({}, BODY, url=URL)
    (found,) = SQUARE.identify(delivery, json.loads(BODY), Verified())
    assert (found.event_id, found.event_type) == (
        "ac3ac95b-f97d-458c-a6e6-18981597e05f",
        "webhooks.test_notification",
    )
    with pytest.raises(InvalidPayload):
        SQUARE.identify(delivery, {"type": "payment.created"}, Verified())


@pytest.mark.parametrize(
    ("body", "url", "signature", "key"),
    [
        (BODY.replace(b"MLEF", b"MLEG"), URL, SIGNATURE, KEY),
        (BODY, URL + "?x=1", SIGNATURE, KEY),  # the notification URL is signed, query and all
        (BODY, URL.replace("https", "http"), SIGNATURE, KEY),
        (BODY, URL, SIGNATURE.replace("GF4Y", "GF4Z"), KEY),
        (BODY, URL, SIGNATURE, KEY + "x"),
        (BODY, URL, SIGNATURE[:-1], KEY),  # no padding
        (BODY, URL, SIGNATURE + "=", KEY),
        (BODY, URL, "", KEY),
        (BODY, "", SIGNATURE, KEY),  # nothing to verify against
    ],
)
def test_square_rejects_any_change_and_malformed_signatures(
    body: bytes, url: str, signature: str, key: str
) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(body, url, signature, key)
