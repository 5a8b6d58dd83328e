"""HubSpot v3 without I/O: the SDK's published vector, its Signature util as the oracle both
ways, the URI decoding HubSpot documents, the window in both directions, per-event keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from unittest import mock

import pytest
from hubspot.utils.signature import Signature

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery, Verified
from webhook_inbox.ingest.schemes.hubspot import signed_uri

# hubspot-api-python tests/spec/utils/test_signature.py
SECRET = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
URI = "https://www.example.com/webhook_uri"
BODY = b"{'example_field':'example_value'}"
MILLIS = "1693657560000"
SIGNATURE = "K36dawei4A+QBNolUOqo7s91KQDWQ5MXZ/QufNYuk/Y="
NOW = int(MILLIS) // 1000
V1_SIGNATURE = "69fc6631a867edd4f9e9e627fc5c1148e3fbdd8b21837b6d2b8901c1fa57f750"

HUBSPOT = schemes.HubSpot()


def headers(signature: str = SIGNATURE, millis: str = MILLIS) -> dict[str, str]:
    return {"X-HubSpot-Signature-v3": signature, "X-HubSpot-Request-Timestamp": millis}


def verify(
    body: bytes = BODY,
    url: str = URI,
    *,
    method: str = "POST",
    sent: dict[str, str] | None = None,
    now: int = NOW,
    secret: str = SECRET,
) -> Verified:
    delivery = Delivery(sent or headers(), body, method, url)
    return HUBSPOT.verify(delivery, [secret], now=now, tolerance=300)


def test_hubspot_published_vector_signs_and_verifies() -> None:
    signed = HUBSPOT.sign(SECRET, BODY, timestamp=NOW, url=URI)
    assert signed.headers == headers()
    assert verify().timestamp == NOW


@pytest.mark.parametrize(
    ("received", "as_signed"),
    [
        # Exactly the escapes in HubSpot's table are decoded, in either case ...
        (
            "https://h.example/p%3A%2F%3F%40%21%24%27%28%29%2A%2C%3B",
            "https://h.example/p:/?@!$'()*,;",
        ),
        ("https://h.example/p?redirect=https%3a%2f%2fx", "https://h.example/p?redirect=https://x"),
        # ... and nothing else: not %20, %26, %3D, %25 nor +, and a decoded % starts nothing.
        ("https://h.example/a%20b?x=%26%3D+%25", "https://h.example/a%20b?x=%26%3D+%25"),
        ("https://h.example/p?v=%253A", "https://h.example/p?v=%253A"),
    ],
)
def test_hubspot_uri_is_decoded_as_documented(received: str, as_signed: str) -> None:
    assert signed_uri(received) == as_signed
    theirs = Signature.get_signature(
        SECRET, BODY.decode(), "v3", http_uri=as_signed, http_method="POST", timestamp=MILLIS
    )
    verify(url=received, sent=headers(theirs))


def test_hubspot_signature_util_and_ours_agree_both_ways() -> None:
    body = b'[{"eventId":1,"subscriptionType":"contact.creation","attemptNumber":0}]'
    url = "https://abc.execute-api.us-east-1.amazonaws.com/webhooks/hubspot?portal=62515"
    ours = HUBSPOT.sign(SECRET, body, timestamp=NOW, url=url).headers
    with mock.patch("hubspot.utils.signature.datetime") as clock:  # the SDK checks the window
        clock.now.return_value = datetime.fromtimestamp(NOW, tz=UTC)
        clock.fromtimestamp.side_effect = datetime.fromtimestamp
        assert Signature.is_valid(
            signature=ours["X-HubSpot-Signature-v3"],
            client_secret=SECRET,
            request_body=body.decode(),
            http_uri=url,
            http_method="POST",
            signature_version="v3",
            timestamp=ours["X-HubSpot-Request-Timestamp"],
        )
    theirs = Signature.get_signature(
        SECRET, body.decode(), "v3", http_uri=url, http_method="GET", timestamp=MILLIS
    )
    verify(body, url, method="GET", sent=headers(theirs))


@pytest.mark.parametrize("skew", [-300, 300])
def test_hubspot_window_is_inclusive_and_both_ways(skew: int) -> None:
    millis = str((NOW + skew) * 1000)
    signed = HUBSPOT.sign(SECRET, BODY, timestamp=NOW + skew, url=URI).headers
    assert signed["X-HubSpot-Request-Timestamp"] == millis
    verify(sent=signed)
    late = (NOW + skew + (1 if skew > 0 else -1)) * 1000
    too_far = HUBSPOT.sign(SECRET, BODY, timestamp=late // 1000, url=URI).headers
    with pytest.raises(AuthenticationFailed) as failure:
        verify(sent=too_far)
    assert failure.value.reason == "stale"


def _signed_at_millis(millis: int) -> dict[str, str]:
    signature = Signature.get_signature(
        SECRET, BODY.decode(), "v3", http_uri=URI, http_method="POST", timestamp=str(millis)
    )
    return headers(signature, str(millis))


@pytest.mark.parametrize(
    ("offset_ms", "fresh"),
    [(300_000, True), (-300_000, True), (300_001, False), (-300_001, False), (300_999, False)],
)
def test_hubspot_window_is_held_to_the_millisecond_both_ways(offset_ms: int, fresh: bool) -> None:
    # The timestamp is in milliseconds: one a fraction of a second past the window is refused,
    # as Linear's and Twitch's are (not rounded into it by dropping the milliseconds).
    sent = _signed_at_millis(NOW * 1000 + offset_ms)
    if fresh:
        verify(sent=sent)
    else:
        with pytest.raises(AuthenticationFailed) as failure:
            verify(sent=sent)
        assert failure.value.reason == "stale"


@pytest.mark.parametrize(
    "change",
    [
        {"body": BODY.replace(b"value", b"valuf")},
        {"url": URI + "x"},
        {"url": URI.replace("https", "http")},
        {"method": "PUT"},
        {"method": "P\ud800ST"},  # nothing a sender can sign (nor one a UTF-8 encoding takes)
        {"method": ""},
        {"sent": headers(millis=str(int(MILLIS) + 1))},  # the timestamp is signed
        {"sent": headers(SIGNATURE.replace("K36d", "K36e"))},
        {"secret": SECRET + "x"},
        {"sent": headers("")},
        {"sent": headers(millis="")},
        {"sent": headers(millis="1693657560.000")},
        {"sent": headers(millis="-1693657560000")},
        {"sent": headers(millis="9" * 16)},
        {"sent": {"X-HubSpot-Signature": V1_SIGNATURE, "X-HubSpot-Signature-Version": "v1"}},
        {"url": ""},
    ],
)
def test_hubspot_rejects_any_change_and_the_unsigned_timestamp_versions(
    change: dict[str, object],
) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(**change)  # type: ignore[arg-type]


BATCH = [
    {"eventId": 1, "subscriptionId": 9, "portalId": 62515, "occurredAt": 1564113600000,
     "subscriptionType": "contact.creation", "attemptNumber": 0, "objectId": 123},
    {"eventId": 1, "subscriptionId": 9, "portalId": 62515, "occurredAt": 1564113600000,
     "subscriptionType": "contact.propertyChange", "attemptNumber": 0, "objectId": 123,
     "propertyName": "email", "propertyValue": "a@example.com"},
]  # fmt: skip


def test_hubspot_batch_is_one_identity_per_event_keyed_without_the_attempt_number() -> None:
    body = json.dumps(BATCH).encode()
    delivery = Delivery({}, body, url=URI)
    found = HUBSPOT.identify(delivery, HUBSPOT.parse(delivery), Verified())
    assert [i.event_type for i in found] == ["contact.creation", "contact.propertyChange"]
    assert [i.payload for i in found] == BATCH
    assert found[0].event_id != found[1].event_id  # eventId is not unique; the type differs
    retry = [dict(event, attemptNumber=3) for event in BATCH]
    again = HUBSPOT.identify(delivery, retry, Verified())
    assert [i.event_id for i in again] == [i.event_id for i in found]
    other_value = [BATCH[0], dict(BATCH[1], propertyValue="b@example.com")]
    changed = HUBSPOT.identify(delivery, other_value, Verified())
    assert changed[1].event_id != found[1].event_id


@pytest.mark.parametrize(
    "payload",
    [[], {"subscriptionType": "x"}, [1], [{"eventId": 1}], [{"subscriptionType": "x" * 256}]],
)
def test_hubspot_payload_that_is_no_batch_of_typed_events_is_a_400(payload: object) -> None:
    with pytest.raises(InvalidPayload):
        HUBSPOT.identify(Delivery({}, b"", url=URI), payload, Verified())
