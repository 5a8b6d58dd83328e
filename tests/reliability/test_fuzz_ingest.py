"""Fuzzing the ingest handler's whole input.

tests/integration/ingest/test_ingest_property.py throws random headers and bodies at well-formed
events. These properties go further: the event document itself is malformed (any JSON shape,
wrong types in every field), and authentic deliveries are mutated one detail at a time (a body
byte, a header character, header case, a repeated header, the base64 flag, the event shape). In
every case, with a healthy database: no exception escapes, no 5xx, a well-formed proxy response,
and no row whose body was not signed by us.

Sized by the Hypothesis profile: ``HYPOTHESIS_PROFILE=long pytest tests/reliability -k fuzz``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import urlencode, urlsplit

import boto3
import psycopg
import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from moto import mock_aws

from tests.ingest_support import SHAPES, rebuilt_url, sample_config_text, shaped_sample_body
from tests.reliability.soak import STANDARD_WEBHOOKS_SECRET
from tests.support import FakeLambdaContext, load_function
from webhook_inbox.errors import InvalidPayload
from webhook_inbox.ingest import bodies, providers
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.store import db


def fuzz_config() -> dict[str, Any]:
    """Every shipped sample provider (one or more per scheme) plus the ``example`` sender."""
    config: dict[str, Any] = json.loads(sample_config_text())
    config["providers"]["example"] = {
        "scheme": "standard-webhooks",
        "secrets": [{"value": STANDARD_WEBHOOKS_SECRET}],
    }
    return config


PROVIDERS = sorted(fuzz_config()["providers"])
SCHEME_OF = {name: spec["scheme"] for name, spec in fuzz_config()["providers"].items()}


@dataclass
class FuzzIngest:
    app: ModuleType
    now: int
    signed: set[bytes] = field(default_factory=set)

    def invoke(self, event: Any) -> dict[str, Any]:
        reply: dict[str, Any] = self.app.handler(event, FakeLambdaContext())
        return reply


@pytest.fixture
def fuzz_ingest(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FuzzIngest]:
    with mock_aws():
        queue_url = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="p")[
            "QueueUrl"
        ]
        monkeypatch.setenv("PROCESSING_QUEUE_URL", queue_url)
        monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(fuzz_config()))
        monkeypatch.delenv("PROVIDERS_CONFIG_FILE", raising=False)
        monkeypatch.delenv("MAX_BODY_BYTES", raising=False)
        now = int(time.time())
        monkeypatch.setattr(ingest, "current_time", lambda: float(now))
        providers.reset_for_tests()
        app = load_function("ingest")
        app.reset_clients()
        yield FuzzIngest(app, now)
        providers.reset_for_tests()
        db.reset_for_tests()


def assert_healthy_answer(reply: Any) -> int:
    """A proxy response every API Gateway shape accepts, never a 5xx with a healthy database:
    ingest's JSON, or the acknowledgement a provider asks for (Twilio's TwiML)."""
    assert isinstance(reply, dict)
    status = reply["statusCode"]
    assert isinstance(status, int)
    assert 200 <= status < 500, reply
    content_type = reply["headers"]["Content-Type"]
    if status == 204 or (content_type, reply["body"]) == ("text/plain", ""):
        # An answer without content: Discord's Webhook Events, every answer Xero gets.
        assert reply["body"] == ""
    elif content_type == "application/json":
        assert isinstance(json.loads(reply["body"]), dict)
    else:  # the acknowledgements providers ask for: Twilio's TwiML, Adyen's [accepted]
        assert (status, content_type, reply["body"]) in {
            (200, "text/xml", "<Response/>"),
            (200, "text/plain", "[accepted]"),
        }
    assert reply["isBase64Encoded"] is False
    event(f"status {status}")
    return status


def assert_only_signed_rows(conn: psycopg.Connection[Any], signed: set[bytes]) -> None:
    stored = {bytes(r[0]) for r in conn.execute("SELECT body_sha256 FROM webhook_events")}
    assert stored <= signed


# --- 1. the event document itself ------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=15,
)
EVENT_KEYS = [
    "body",
    "isBase64Encoded",
    "headers",
    "multiValueHeaders",
    "pathParameters",
    "rawPath",
    "path",
    "requestContext",
    "version",
    "routeKey",
]
field_values = st.one_of(
    json_values,
    st.just({"provider": "stripe"}),
    st.sampled_from(["/webhooks/stripe", "/webhooks/", "/webhooks/stripe/x", "webhooks"]),
    st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode()),
)
malformed_events = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(EVENT_KEYS), field_values, max_size=8),
)


@given(raw_event=malformed_events)
@example(raw_event={"body": "\x80", "isBase64Encoded": True})  # once a ValueError (a 502)
def test_any_event_document_gets_a_well_formed_non_5xx_answer(
    fuzz_ingest: FuzzIngest, conn: psycopg.Connection[Any], raw_event: Any
) -> None:
    assert_healthy_answer(fuzz_ingest.invoke(raw_event))
    assert_only_signed_rows(conn, fuzz_ingest.signed)  # nothing was signed: nothing stored


# --- 2. authentic deliveries, mutated one detail at a time ------------------------------------

MUTATIONS = [
    "none",
    "flip_body_byte",
    "append_body_byte",
    "header_value_char",
    "drop_header",
    "upper_case_names",
    "repeat_header_differently",
    "base64_body",
    "base64_without_padding",
    "wrong_base64_flag",
    "other_provider",
    "stale_timestamp",
]


def _body(provider: str, n: int, note: str) -> bytes:
    shaped = shaped_sample_body(provider, str(n), note)
    if shaped is not None:
        return shaped
    document: dict[str, Any] = {
        "id": f"evt_fuzz_{n}",
        "type": "customer.created",
        "event_id": f"Ev_fuzz_{n}",
        "event": {"type": "message"},
        "data": {"id": f"cus_{n}", "note": note},
    }
    if provider == "slack":
        document["type"] = "event_callback"
    if provider == "paddle":
        document["event_type"] = "customer.created"
    if provider == "hubspot":  # a batch of events
        return json.dumps([dict(document, subscriptionType="contact.creation")]).encode()
    if provider == "twilio":  # a form
        return urlencode({"MessageSid": f"SM{n}", "MessageStatus": "sent", "Body": note}).encode()
    document.update(SCHEME_FIELDS.get(_scheme(provider), {}))
    return json.dumps(document).encode()


def _form_params(body: bytes) -> dict[str, list[str]] | None:
    """A form's parameters as Twilio signs them (each name once, its distinct values)."""
    try:
        form = bodies.form(body)
    except InvalidPayload:
        return None
    return {k: sorted(set(v if isinstance(v, list) else [v])) for k, v in form.items()}


# What each sender needs beside the fields above for its deliveries to be accepted.
SCHEME_FIELDS: dict[str, dict[str, Any]] = {
    "mailgun": {"event": "delivered"},  # the body is the event-data; signing wraps it
    "linear": {"action": "create"},  # signing stamps webhookTimestamp
    "zoom": {"event": "meeting.started"},
    "twitch": {"subscription": {"type": "channel.follow"}},  # with "event" above: a notification
    # The body is the notification item (signing wraps and signs it).
    "adyen": {"pspReference": "8800000000000001", "eventCode": "AUTHORISATION", "success": "true"},
    "meta": {"object": "page", "entry": [{"id": "1"}]},
    "whatsapp": {"object": "whatsapp_business_account", "entry": [{"id": "1"}]},
    "x": {"tweet_create_events": [{"id_str": "1"}]},
    "dropbox": {"list_folder": {"accounts": ["dbid:1"]}},
    "asana": {"events": [{"action": "changed", "resource": {"resource_type": "task"}}]},
    "xero": {"events": [{"eventCategory": "INVOICE", "eventType": "UPDATE"}]},
    "microsoft-graph": {"value": [{"changeType": "created"}]},  # signing sets clientState
    "okta": {"data": {"events": [{"uuid": "u1", "eventType": "user.session.start"}]}},
}


def _scheme(provider: str) -> str:
    return SCHEME_OF[provider]


# GitLab providers with the classic secret token: it covers no byte of the body.
TOKEN_ONLY = {
    name
    for name, spec in fuzz_config()["providers"].items()
    if spec["scheme"] == "gitlab" and spec.get("options", {}).get("auth") != "signing-token"
}


def _signed_parts(scheme: str, body: bytes) -> Any:
    """What a sender that signs less than the body's bytes authenticates, read independently of
    the scheme code, or None when the body holds none of it: Adyen's eight fields and signature
    per item, Braintree's two form fields, Graph's clientState per notification."""
    try:
        if scheme == "braintree":
            form = bodies.form(body)
            return form.get("bt_signature"), form.get("bt_payload")
        document = json.loads(body)
        if scheme == "microsoft-graph":
            return [item["clientState"] for item in document["value"]] or None
        items = [entry["NotificationRequestItem"] for entry in document["notificationItems"]]
    except (ValueError, TypeError, KeyError, AttributeError, InvalidPayload):
        return None
    names = ("pspReference", "originalReference", "merchantAccountCode", "merchantReference")
    return [
        (
            [item.get(k) for k in names],
            [(item.get("amount") or {}).get(k) for k in ("value", "currency")],
            [item.get(k) for k in ("eventCode", "success")],
            item.get("additionalData", {}).get("hmacSignature"),
        )
        for item in items
    ] or None


# What an SNS message signs (its string to sign, by type) and how (the signature fields).
SNS_SIGNED = (
    "Message", "MessageId", "Subject", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type",
    "Signature", "SignatureVersion", "SigningCertURL",
)  # fmt: skip


def _sns_signed(body: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    return {k: document.get(k) for k in SNS_SIGNED}


def _still_authentic(provider: str, signed: bytes, mutated: bytes) -> bool:
    """Whether ``mutated`` is authentic by the sender's own rules although it differs from what
    was signed (the docs' weaker guarantees): GitLab's secret token, Telegram's and Okta's
    header cover no byte of the body, nor does Google Pub/Sub's token, Mailgun's signature only
    its own object in it, Adyen's its items' eight fields, Braintree's its two form fields,
    Graph's clientState only itself, SNS's the fields of its string to sign, so a body carrying
    those unchanged is authentic."""
    if provider in TOKEN_ONLY or _scheme(provider) in {"telegram", "okta", "google-pubsub"}:
        return True
    if _scheme(provider) == "sns":
        return _sns_signed(mutated) is not None and _sns_signed(mutated) == _sns_signed(signed)
    if _scheme(provider) in {"adyen", "braintree", "microsoft-graph"}:
        found = _signed_parts(_scheme(provider), mutated)
        return found is not None and found == _signed_parts(_scheme(provider), signed)
    if _scheme(provider) != "mailgun":
        return False

    def signature(body: bytes) -> Any:
        try:
            found = json.loads(body)["signature"]
            return {k: v.lower() if isinstance(v, str) else v for k, v in found.items()}
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    return signature(mutated) is not None and signature(mutated) == signature(signed)


def _mutate(
    mutation: str, body: bytes, headers: dict[str, str], data: st.DataObject
) -> tuple[bytes, dict[str, str], dict[str, Any]]:
    """The mutated body and headers plus how the event is framed (base64, multi-value)."""
    framing: dict[str, Any] = {}
    names = sorted(headers)
    if mutation == "flip_body_byte":
        at = data.draw(st.integers(0, len(body) - 1))
        body = body[:at] + bytes([body[at] ^ data.draw(st.integers(1, 255))]) + body[at + 1 :]
    elif mutation == "append_body_byte":
        body += data.draw(st.sampled_from([b" ", b"\n", b"\x00", b"}"]))
    elif mutation == "header_value_char":
        name = data.draw(st.sampled_from(names))
        value = headers[name]
        at = data.draw(st.integers(0, max(0, len(value) - 1)))
        headers[name] = value[:at] + data.draw(st.characters(codec="utf-8")) + value[at + 1 :]
    elif mutation == "drop_header":
        headers.pop(data.draw(st.sampled_from(names)))
    elif mutation == "upper_case_names":
        headers = {k.upper(): v for k, v in headers.items()}
    elif mutation == "repeat_header_differently":
        name = data.draw(st.sampled_from(names))
        framing["extra_values"] = {name: data.draw(st.text(max_size=40))}
    elif mutation == "base64_body":
        framing["base64"] = base64.b64encode(body).decode()
    elif mutation == "base64_without_padding":
        framing["base64"] = base64.b64encode(body).decode().rstrip("=")
    elif mutation == "wrong_base64_flag":
        framing["base64_flag_only"] = True
    elif mutation == "other_provider":
        framing["provider"] = data.draw(st.sampled_from(PROVIDERS))
    return body, headers, framing


@given(
    provider=st.sampled_from(PROVIDERS),
    shape=st.sampled_from(sorted(SHAPES)),
    mutation=st.sampled_from(MUTATIONS),
    n=st.integers(0, 30),
    note=st.text(max_size=30),
    data=st.data(),
)
def test_a_mutated_authentic_delivery_is_never_stored_unless_what_was_signed_is_intact(
    fuzz_ingest: FuzzIngest,
    conn: psycopg.Connection[Any],
    *,
    provider: str,
    shape: str,
    mutation: str,
    n: int,
    note: str,
    data: st.DataObject,
) -> None:
    body = _body(provider, n, note)
    registry = providers.registry()
    stale_by = registry[provider].tolerance_seconds + 1
    timestamp = fuzz_ingest.now - (stale_by if mutation == "stale_timestamp" else 0)
    signed = providers.sign_delivery(
        registry[provider],
        body,
        event_id=f"msg_fuzz_{n}",
        timestamp=timestamp,
        event_type="issues" if provider == "github" else "orders/create",
        url=rebuilt_url(shape, provider),  # URL-signed senders sign what they call
    )
    signed_body = signed.body  # Mailgun signs inside the body, Linear stamps it
    fuzz_ingest.signed.add(hashlib.sha256(signed_body).digest())
    body, headers, framing = _mutate(mutation, signed_body, dict(signed.headers), data)
    # Twilio signs a form's decoded parameters, not its bytes: a change that decodes to the
    # same parameters (%2b for %2B) is the signed content, stored as it was signed.
    same_form = provider == "twilio" and _form_params(body) == _form_params(signed_body)
    still_authentic = same_form or _still_authentic(provider, signed_body, body)
    if still_authentic:
        fuzz_ingest.signed.add(hashlib.sha256(body).digest())
    target = framing.get("provider", provider)
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:  # API Gateway base64-encodes a body that is not text
        framing.setdefault("base64", base64.b64encode(body).decode())
    raw_event = SHAPES[shape](target, b"", headers, query=urlsplit(signed.url).query)
    raw_event["body"] = framing.get("base64", body.decode("utf-8", errors="replace"))
    if "base64" in framing:
        raw_event["isBase64Encoded"] = True
    if framing.get("base64_flag_only"):
        raw_event["isBase64Encoded"] = True
    for name, value in framing.get("extra_values", {}).items():
        if "multiValueHeaders" in raw_event:
            raw_event["multiValueHeaders"][name] = [value, headers[name]]
        else:
            raw_event["headers"][name.lower()] = f"{headers[name]},{value}"
    status = assert_healthy_answer(fuzz_ingest.invoke(raw_event))
    if (mutation == "flip_body_byte" and not still_authentic) or (
        mutation == "stale_timestamp" and registry[provider].scheme.uses_timestamp
    ):
        assert status == 401
    assert_only_signed_rows(conn, fuzz_ingest.signed)


@pytest.mark.parametrize(
    ("provider", "header", "value"),
    [
        ("acme", "X-Acme-Event-Id", "\x00sg_1"),  # unsigned delivery id
        ("github", "X-GitHub-Event", "issues\ud800"),  # unsigned event type
        ("shopify", "X-Shopify-Webhook-Id", "id\x00"),
        ("twilio", "I-Twilio-Idempotency-Token", "tok\udfff"),
    ],
)
def test_an_unsigned_header_postgres_cannot_store_is_a_400_not_a_500(
    fuzz_ingest: FuzzIngest, conn: psycopg.Connection[Any], provider: str, header: str, value: str
) -> None:
    """Found by the mutation property: these once failed the INSERT with a 500."""
    body = _body(provider, 1, "")
    headers = providers.sign_delivery(
        providers.registry()[provider],
        body,
        event_id="msg_1",
        event_type="orders/create",
        url=rebuilt_url("v1", provider),
    ).headers
    headers[header] = value
    reply = fuzz_ingest.invoke(SHAPES["v1"](provider, body, headers))
    assert reply["statusCode"] == 400
    assert_only_signed_rows(conn, set())


@pytest.mark.parametrize(
    ("provider", "header"),
    [
        ("acme-timestamped", "X-Webhook-Id"),  # a signed id, rendered into the signed content
        ("acme-timestamped", "X-Webhook-Timestamp"),
        ("svix", "webhook-id"),
        ("stripe", "Stripe-Signature"),
    ],
)
def test_a_signed_header_no_sender_could_have_sent_is_a_401_not_a_500(
    fuzz_ingest: FuzzIngest, conn: psycopg.Connection[Any], provider: str, header: str
) -> None:
    """A lone surrogate cannot be encoded, so no sender signed it: the signature fails, and the
    handler does not crash on encoding the signed content."""
    body = _body(provider, 2, "")
    headers = providers.sign_delivery(
        providers.registry()[provider], body, event_id="msg_2", url=rebuilt_url("v1", provider)
    ).headers
    headers[header] = headers[header] + "\ud800"
    reply = fuzz_ingest.invoke(SHAPES["v1"](provider, body, headers))
    assert reply["statusCode"] == 401
    assert_only_signed_rows(conn, set())
