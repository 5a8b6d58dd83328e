"""Twilio without I/O: the published request-validator vectors, Twilio's RequestValidator as the
oracle both ways (form and JSON deliveries, ports), strict decoding, types and keys."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twilio.request_validator import RequestValidator

from webhook_inbox.errors import AuthenticationFailed, InvalidPayload
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery, Verified
from webhook_inbox.ingest.schemes.twilio import FormParams

# twilio-python tests/unit/test_request_validator.py (the same vectors in every Twilio SDK).
TOKEN = "12345"
URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+14158675309",
    "Digits": "1234",
    "From": "+14158675309",
    "To": "+18005551212",
}
FORM = urlencode(PARAMS).encode()
JSON_BODY = b'{"property": "value", "boolean": true}'
JSON_HASH = "0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"

TWILIO = schemes.Twilio()


def verify(body: bytes, url: str, signature: str, secrets: list[str] | None = None) -> Verified:
    delivery = Delivery({"X-Twilio-Signature": signature}, body, url=url)
    return TWILIO.verify(delivery, secrets or [TOKEN], now=0, tolerance=300)


class MultiDict(dict[str, list[str]]):
    """The shape Twilio's validator reads repeated parameters from (Flask's getall)."""

    def getall(self, name: str) -> list[str]:
        return self[name]


# --- the published vectors ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "signature"),
    [
        (URL, "RSOYDt4T1cUTdK1PDd93/VVr8B8="),
        (URL, "kvajT1Ptam85bY51eRf/AJRuM3w="),  # signed with :443 added
        (URL.replace(".com", ".com:1234"), "RSOYDt4T1cUTdK1PDd93/VVr8B8="),  # port removed
        (URL.replace(".com", ".com:1234").replace("https", "http"), "Zmvh+3yNM1Phv2jhDCwEM3q5ebU="),
        (URL.replace("https", "http"), "0ZXoZLH/DfblKGATFgpif+LLRf4="),  # signed with :80 added
    ],
)
def test_twilio_published_form_vectors_verify(url: str, signature: str) -> None:
    verified = verify(FORM, url, signature)
    assert verified.payload == PARAMS
    assert isinstance(verified.payload, FormParams)


def test_twilio_published_vectors_are_what_we_sign() -> None:
    assert TWILIO.sign(TOKEN, FORM, timestamp=0, url=URL).headers == {
        "X-Twilio-Signature": "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    }
    signed = TWILIO.sign(TOKEN, JSON_BODY, timestamp=0, url=URL)
    assert signed.url == f"{URL}&bodySHA256={JSON_HASH}"
    assert signed.headers["X-Twilio-Signature"] == "a9nBmqA0ju/hNViExpshrM61xv4="
    assert signed.headers["Content-Type"] == "application/json"
    assert signed.body == JSON_BODY


def test_twilio_published_repeated_parameter_vector() -> None:
    body = b"Sid=CA123&SidAccount=AC123&Digits=5678&Digits=1234&Digits=1234"
    verified = verify(body, URL, "IK+Dwps556ElfBT0I3Rgjkr1wJU=")
    assert verified.payload == {
        "Sid": "CA123",
        "SidAccount": "AC123",
        "Digits": ["5678", "1234", "1234"],
    }


def test_twilio_published_json_vector_verifies_and_parses_as_json() -> None:
    url = f"{URL}&bodySHA256={JSON_HASH}"
    verified = verify(JSON_BODY, url, "a9nBmqA0ju/hNViExpshrM61xv4=")
    assert verified.payload is None  # not parsed while verifying: ingest parses it
    payload = TWILIO.parse(Delivery({}, JSON_BODY, url=url))
    assert payload == {"property": "value", "boolean": True}
    assert not isinstance(payload, FormParams)


# --- Twilio's RequestValidator as the oracle, both ways -----------------------------------

names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=8)
values = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
forms = st.dictionaries(names, st.lists(values, min_size=1, max_size=3), max_size=6)
urls = st.sampled_from(
    [
        URL,
        "https://abc123.execute-api.us-east-1.amazonaws.com/webhooks/twilio",
        "http://127.0.0.1:3000/webhooks/twilio?tenant=a%20b&x=",
        "https://hooks.example.com:8443/in/twilio",
        "https://hooks.example.com:443/in/twilio",
    ]
)


@given(params=forms, url=urls)
def test_twilio_validator_and_ours_agree_on_any_form_both_ways(
    params: dict[str, list[str]], url: str
) -> None:
    body = urlencode(params, doseq=True).encode()
    theirs = RequestValidator(TOKEN).compute_signature(url, MultiDict(params))
    verify(body, url, theirs)
    ours = TWILIO.sign(TOKEN, body, timestamp=0, url=url)
    assert ours.url == url
    assert RequestValidator(TOKEN).validate(
        url, MultiDict(params), ours.headers["X-Twilio-Signature"]
    )


@given(document=st.dictionaries(names, values, max_size=5), url=urls)
def test_twilio_validator_and_ours_agree_on_json_bodies_both_ways(
    document: dict[str, str], url: str
) -> None:
    import json

    body = json.dumps(document).encode()
    ours = TWILIO.sign(TOKEN, body, timestamp=0, url=url)
    assert RequestValidator(TOKEN).validate(
        ours.url, body.decode(), ours.headers["X-Twilio-Signature"]
    )
    digest = hashlib.sha256(body).hexdigest()
    hashed_url = url + ("&" if "?" in url else "?") + f"bodySHA256={digest}"
    theirs = RequestValidator(TOKEN).compute_signature(hashed_url, {})
    verify(body, hashed_url, theirs)


def test_twilio_port_variants_follow_the_validator() -> None:
    # A non-default port is kept or removed, never swapped for the default one.
    url = "https://hooks.example.com:8443/in"
    for signed_for in (url, "https://hooks.example.com/in"):
        signature = RequestValidator(TOKEN).compute_signature(signed_for, PARAMS)
        verify(FORM, url, signature)
    wrong = RequestValidator(TOKEN).compute_signature("https://hooks.example.com:443/in", PARAMS)
    with pytest.raises(AuthenticationFailed):
        verify(FORM, url, wrong)


# --- one changed byte fails ---------------------------------------------------------------


SIGNATURE = "RSOYDt4T1cUTdK1PDd93/VVr8B8="


@pytest.mark.parametrize(
    ("body", "url", "signature", "secret"),
    [
        (FORM.replace(b"1234", b"1235"), URL, SIGNATURE, TOKEN),  # a parameter value
        (FORM + b"&Extra=1", URL, SIGNATURE, TOKEN),  # a parameter added
        (FORM, URL.replace("foo=1", "foo=2"), SIGNATURE, TOKEN),  # the query string
        (FORM, URL.replace("myapp", "myapq"), SIGNATURE, TOKEN),  # the path
        (FORM, URL.replace("https", "http"), SIGNATURE, TOKEN),  # the scheme
        (FORM, URL, SIGNATURE.replace("RSOY", "RSOZ"), TOKEN),
        (FORM, URL, SIGNATURE, "12346"),  # the key
    ],
)
def test_twilio_rejects_any_change_to_what_is_signed(
    body: bytes, url: str, signature: str, secret: str
) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(body, url, signature, [secret])


def test_twilio_json_body_must_match_its_bodysha256() -> None:
    url = f"{URL}&bodySHA256={JSON_HASH}"
    signature = "a9nBmqA0ju/hNViExpshrM61xv4="
    with pytest.raises(AuthenticationFailed):
        verify(JSON_BODY.replace(b"value", b"valuf"), url, signature)
    # Without bodySHA256 the delivery is a form: a JSON body is no form, so nothing verifies.
    with pytest.raises(AuthenticationFailed):
        verify(JSON_BODY, URL, signature)


@pytest.mark.parametrize(
    ("url", "signature"),
    [
        (URL, ""),
        (URL, "RSOYDt4T1cUTdK1PDd93/VVr8B8"),  # no padding
        (URL, "RSOYDt4T1cUTdK1PDd93/VVr8B8=="),
        (URL, "RSOYDt4T1cUTdK1PDd93/VVr8B8=AAAA"),
        (URL, "RSOYDt4T1cUTdK1PDd93_VVr8B8="),  # URL-safe alphabet
        (URL, "K36dawei4A+QBNolUOqo7s91KQDWQ5MXZ/QufNYuk/Y="),  # a SHA-256 length
        ("", SIGNATURE),  # no URL
        ("https://mycompany.com:x/myapp.php", SIGNATURE),  # a port that is no number
        ("https://mycompany.com/\ud800", SIGNATURE),  # not encodable
        ("https://[mycompany.com/myapp.php", SIGNATURE),  # urlsplit raises (found by fuzzing)
        (f"{URL}&bodySHA256=abc", SIGNATURE),
        (f"{URL}&bodySHA256={JSON_HASH}&bodySHA256={JSON_HASH}", SIGNATURE),
    ],
)
def test_twilio_rejects_malformed_signatures_and_urls(url: str, signature: str) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(FORM, url, signature)


def test_twilio_a_body_that_is_not_a_form_is_a_401_not_a_400() -> None:
    signature = TWILIO.sign(TOKEN, b"\xff\xfe", timestamp=0, url=URL).headers["X-Twilio-Signature"]
    with pytest.raises(AuthenticationFailed):
        verify(b"\xff\xfe", URL, signature)


def test_twilio_rotated_tokens_each_verify() -> None:
    signature = TWILIO.sign("old-token", FORM, timestamp=0, url=URL).headers["X-Twilio-Signature"]
    assert verify(FORM, URL, signature, ["new-token", "old-token"]).secret == "old-token"


# --- types, keys, acknowledgement ---------------------------------------------------------


def identify(params: dict[str, Any], headers: dict[str, str] | None = None) -> schemes.Identity:
    body = urlencode(params, doseq=True).encode()
    delivery = Delivery(headers or {}, body, url=URL)
    (found,) = TWILIO.identify(delivery, TWILIO.parse(delivery), Verified())
    return found


@pytest.mark.parametrize(
    ("params", "event_type"),
    [
        (
            {"MessageSid": "SM1", "MessageStatus": "delivered", "SmsStatus": "delivered"},
            "message.delivered",
        ),
        (
            {"MessageSid": "SM1", "SmsSid": "SM1", "SmsStatus": "received", "Body": "hi"},
            "message.received",
        ),
        ({"MessageSid": "MM1", "Body": "hi"}, "message"),
        ({"CallSid": "CA1", "CallStatus": "completed"}, "call.completed"),
        (
            {"CallSid": "CA1", "RecordingSid": "RE1", "RecordingStatus": "completed"},
            "recording.completed",
        ),
        ({"EventType": "task.created", "TaskSid": "WT1"}, "task.created"),
        ({"AccountSid": "AC1"}, "twilio"),
    ],
)
def test_twilio_event_type_is_derived_from_the_parameters(
    params: dict[str, str], event_type: str
) -> None:
    assert identify(params).event_type == event_type


def test_twilio_key_covers_the_signed_parameters_not_their_order() -> None:
    queued = {"MessageSid": "SM1", "MessageStatus": "queued", "AccountSid": "AC1"}
    first = identify(queued)
    assert first.event_id.startswith("sha256:")
    reordered = dict(reversed(list(queued.items())))
    assert identify(reordered).event_id == first.event_id
    # Repeating a value signs the same, so it is the same event.
    assert identify({**queued, "AccountSid": ["AC1", "AC1"]}).event_id == first.event_id
    # The same message in its next status is another event (MessageSid alone is no key).
    sent = identify({**queued, "MessageStatus": "sent"})
    assert (sent.event_type, sent.event_id != first.event_id) == ("message.sent", True)


def test_twilio_key_is_the_signed_text_however_it_is_grouped_and_either_port_form() -> None:
    queued = {"MessageSid": "SM1", "MessageStatus": "queued", "AccountSid": "AC1"}
    first = identify(queued)
    regrouped = {"MessageSid": "SM1", "MessageStatus": "queued", "AccountSi": "dAC1"}
    assert identify(regrouped).event_id == first.event_id
    body = urlencode(queued).encode()
    with_port = Delivery({}, body, url=URL.replace(".com", ".com:443"))
    (found,) = TWILIO.identify(with_port, TWILIO.parse(with_port), Verified())
    assert found.event_id == first.event_id


def test_twilio_idempotency_token_is_the_delivery_id_only() -> None:
    params = {"CallSid": "CA1", "CallStatus": "ringing"}
    with_token = identify(params, {"I-Twilio-Idempotency-Token": "tok-1"})
    assert with_token.delivery_id == "tok-1"
    assert identify(params, {"I-Twilio-Idempotency-Token": "tok-2"}).event_id == with_token.event_id


def test_twilio_json_delivery_is_typed_by_its_body_and_keyed_by_its_bytes() -> None:
    url = f"{URL}&bodySHA256={JSON_HASH}"
    body = b'{"type":"studio.flow","n":1}'
    delivery = Delivery({}, body, url=url)
    (found,) = TWILIO.identify(delivery, TWILIO.parse(delivery), Verified())
    assert found.event_type == "studio.flow"
    assert found.event_id == schemes.body_digest_id("studio.flow", body)
    untyped = Delivery({}, JSON_BODY, url=url)
    assert TWILIO.identify(untyped, TWILIO.parse(untyped), Verified())[0].event_type == "json"


def test_twilio_status_that_postgres_or_the_type_limit_refuses_is_a_400() -> None:
    with pytest.raises(InvalidPayload):
        identify({"CallSid": "CA1", "CallStatus": "x" * 300})
    with pytest.raises(InvalidPayload):
        identify({"CallSid": "CA1", "CallStatus": ["a", "b"]})


def test_twilio_form_deliveries_are_answered_with_empty_twiml() -> None:
    reply = TWILIO.acknowledge(FormParams(PARAMS), new=True)
    assert reply is not None
    assert (reply.status, reply.content_type, reply.body) == (200, "text/xml", "<Response/>")
    assert TWILIO.acknowledge(FormParams(PARAMS), new=False) == reply
    assert TWILIO.acknowledge({"property": "value"}, new=True) is None  # JSON: ingest's answer
