"""Signatures inside the body (Adyen, Braintree) and shared values (Microsoft Graph's
clientState, Okta's header), without I/O: Adyen's and Braintree's own libraries as oracles both
ways (they sign, we verify; we sign, they verify), the documented rule for Graph and Okta (no
library of theirs checks it); then forgery, a wrong key, malformed and missing material and
redeliveries, scheme by scheme. The keys are made here, never real ones."""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import hmac
import json
import secrets
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

import braintree
import pytest
from Adyen import util as adyen_util

from tests.support import EVENTS_DIR
from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    SignatureMismatch,
)
from webhook_inbox.ingest import providers, schemes
from webhook_inbox.ingest.schemes import Delivery, Reply
from webhook_inbox_tools import sample_events

REGISTRY = providers.load_config_text((EVENTS_DIR / "providers.local.json").read_text())
NOW = int(time.time())
ADYEN_KEY = secrets.token_hex(32).upper()  # as the Customer Area shows one: 64 hex digits
BT_PUBLIC, BT_PRIVATE = "testpublic" + secrets.token_hex(3), secrets.token_hex(16)
BT_SECRET = f"{BT_PUBLIC}:{BT_PRIVATE}"
GRAPH_STATE = secrets.token_urlsafe(24)
OKTA_HEADER = "Bearer " + secrets.token_urlsafe(24)


def sample(name: str, event_type: str | None = None) -> tuple[bytes, str]:
    catalog = sample_events.catalog(name)
    assert catalog is not None
    chosen = event_type or catalog.default
    return sample_events.build(REGISTRY.providers[name], chosen, now=NOW).body, chosen


def run(name: str, secret: str, headers: dict[str, str], body: bytes, **kw: Any) -> Any:
    """verify, then identify, as ingest runs them."""
    scheme = schemes.build(name, kw.pop("options", None))
    delivery = Delivery(headers, body, kw.pop("method", "POST"), kw.pop("url", ""))
    verified = scheme.verify(delivery, [secret], now=NOW, tolerance=300)
    payload = scheme.parse(delivery) if verified.payload is None else verified.payload
    return scheme.identify(delivery, payload, verified)


# --- Adyen -----------------------------------------------------------------------------------


def adyen_body(*codes: str) -> dict[str, Any]:
    document = json.loads(sample("adyen")[0])
    item = document["notificationItems"][0]["NotificationRequestItem"]
    items = []
    for n, code in enumerate(codes):
        one = {**copy.deepcopy(item), "eventCode": code, "pspReference": f"88{NOW}{n:04d}"}
        one["additionalData"] = {}
        items.append({"NotificationRequestItem": one})
    return {"live": "false", "notificationItems": items}


def adyen_signed_by_library(document: dict[str, Any]) -> bytes:
    for entry in document["notificationItems"]:
        item = entry["NotificationRequestItem"]
        unsigned = {k: v for k, v in item.items() if k != "additionalData"}
        signature = adyen_util.generate_notification_sig(unsigned, ADYEN_KEY).decode()
        item["additionalData"] = {**item.get("additionalData", {}), "hmacSignature": signature}
    return json.dumps(document).encode()


def test_adyens_library_signs_what_we_verify_and_verifies_what_we_sign() -> None:
    body = adyen_signed_by_library(adyen_body("AUTHORISATION", "CAPTURE"))
    found = run("adyen", ADYEN_KEY, {}, body)
    assert [i.event_type for i in found] == ["AUTHORISATION", "CAPTURE"]
    assert [i.event_id for i in found] == [f"88{NOW}0000:AUTHORISATION:true",
                                           f"88{NOW}0001:CAPTURE:true"]  # fmt: skip
    assert all(i.payload["live"] == "false" for i in found)
    ours = schemes.build("adyen").sign(ADYEN_KEY, json.dumps(adyen_body("REFUND")).encode(),
                                       timestamp=NOW)  # fmt: skip
    assert adyen_util.is_valid_hmac_notification(json.loads(ours.body), ADYEN_KEY)


def test_the_documented_signed_string_with_a_missing_original_reference() -> None:
    item = adyen_body("AUTHORISATION")["notificationItems"][0]["NotificationRequestItem"]
    item.pop("originalReference", None)
    text = ":".join([item["pspReference"], "", item["merchantAccountCode"],
                     item["merchantReference"], str(item["amount"]["value"]),
                     item["amount"]["currency"], "AUTHORISATION", "true"])  # fmt: skip
    mac = hmac.new(binascii.a2b_hex(ADYEN_KEY), text.encode(), hashlib.sha256).digest()
    item["additionalData"] = {"hmacSignature": base64.b64encode(mac).decode()}
    body = json.dumps({"live": "false", "notificationItems": [{"NotificationRequestItem": item}]})
    assert run("adyen", ADYEN_KEY, {}, body.encode())[0].event_type == "AUTHORISATION"


def test_every_adyen_item_is_verified_not_only_the_first() -> None:
    """Adyen's helper checks the first item alone: a forged second item passes it, not us."""
    document = json.loads(adyen_signed_by_library(adyen_body("AUTHORISATION", "REFUND")))
    document["notificationItems"][1]["NotificationRequestItem"]["amount"]["value"] = 1
    assert adyen_util.is_valid_hmac_notification(document, ADYEN_KEY)  # the helper's blind spot
    with pytest.raises(SignatureMismatch):
        run("adyen", ADYEN_KEY, {}, json.dumps(document).encode())


@pytest.mark.parametrize(
    "field", ["pspReference", "merchantReference", "eventCode", "success", "amount"]
)
def test_a_changed_signed_adyen_field_is_a_mismatch(field: str) -> None:
    document = json.loads(adyen_signed_by_library(adyen_body("AUTHORISATION")))
    item = document["notificationItems"][0]["NotificationRequestItem"]
    item[field] = {"value": 1, "currency": "EUR"} if field == "amount" else item[field] + "0"
    with pytest.raises(SignatureMismatch):
        run("adyen", ADYEN_KEY, {}, json.dumps(document).encode())


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d: d.pop("notificationItems"),
        lambda d: d.update(notificationItems=[]),
        lambda d: d["notificationItems"][0].update(NotificationRequestItem="x"),
        lambda d: d["notificationItems"][0]["NotificationRequestItem"].pop("additionalData"),
        lambda d: d["notificationItems"][0]["NotificationRequestItem"]["additionalData"].update(
            hmacSignature="not base64"
        ),
        lambda d: d["notificationItems"][0]["NotificationRequestItem"].update(success=True),
    ],
)
def test_malformed_adyen_signature_material_is_a_401(mangle: Any) -> None:
    document = json.loads(adyen_signed_by_library(adyen_body("AUTHORISATION")))
    mangle(document)
    with pytest.raises(AuthenticationFailed):
        run("adyen", ADYEN_KEY, {}, json.dumps(document).encode())
    with pytest.raises(AuthenticationFailed):
        run("adyen", ADYEN_KEY, {}, b"not json")


def test_adyen_wrong_key_redelivery_and_answer() -> None:
    body = adyen_signed_by_library(adyen_body("AUTHORISATION"))
    with pytest.raises(SignatureMismatch):
        run("adyen", secrets.token_hex(32), {}, body)
    redelivered = json.dumps(json.loads(body), indent=2).encode()  # other bytes, same fields
    assert run("adyen", ADYEN_KEY, {}, body)[0].event_id == (
        run("adyen", ADYEN_KEY, {}, redelivered)[0].event_id
    )
    assert schemes.build("adyen").acknowledge({}, new=True) == Reply(
        "[accepted]", 200, "text/plain"
    )


@pytest.mark.parametrize("key", ["", "zz" * 32, "abc", "00" * 8])
def test_an_adyen_key_that_is_not_long_hex_is_refused_at_load(key: str) -> None:
    config = {"providers": {"a": {"scheme": "adyen", "secrets": [{"value": key}]}}}
    with pytest.raises(ConfigurationError, match="provider 'a'"):
        providers.parse_config(config)


# --- Braintree -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> braintree.BraintreeGateway:
    config = braintree.Configuration(
        braintree.Environment.Sandbox, "test_merchant", BT_PUBLIC, BT_PRIVATE
    )
    return braintree.BraintreeGateway(config)


KINDS = ["subscription_charged_successfully", "subscription_canceled", "dispute_opened", "check"]


@pytest.mark.parametrize("kind", KINDS)
def test_braintrees_library_signs_what_we_verify(gateway: Any, kind: str) -> None:
    made = gateway.webhook_testing.sample_notification(kind, "sub_1")
    body = urlencode({k: v.decode() if isinstance(v, bytes) else v for k, v in made.items()})
    (found,) = run("braintree", BT_SECRET, {}, body.encode())
    assert found.event_type == kind
    assert found.event_id.startswith("sha256:")


@pytest.mark.parametrize("event_type", ["subscription_charged_successfully", "dispute_opened"])
def test_braintrees_library_parses_what_we_sign(gateway: Any, event_type: str) -> None:
    body, _ = sample("braintree", event_type)
    signed = schemes.build("braintree").sign(BT_SECRET, body, timestamp=NOW)
    fields = dict(parse_qsl(signed.body.decode()))
    notification = gateway.webhook_notification.parse(fields["bt_signature"], fields["bt_payload"])
    assert notification.kind == event_type
    assert run("braintree", BT_SECRET, {}, signed.body)[0].event_type == event_type


def test_braintrees_challenge_answer_is_the_librarys(gateway: Any) -> None:
    challenge = secrets.token_hex(10)
    delivery = Delivery({}, b"", "GET", f"https://h/webhooks/bt?bt_challenge={challenge}")
    reply = schemes.build("braintree").handshake(delivery, [BT_SECRET])
    assert reply is not None
    assert reply.body == gateway.webhook_notification.verify(challenge)
    with pytest.raises(InvalidPayload):
        schemes.build("braintree").handshake(
            Delivery({}, b"", "GET", "https://h/w?bt_challenge=%7B%22a%22%7D"), [BT_SECRET]
        )


def braintree_form(gateway: Any, **changes: str) -> bytes:
    made = gateway.webhook_testing.sample_notification("subscription_canceled", "sub_2")
    fields = {k: v.decode() if isinstance(v, bytes) else v for k, v in made.items()}
    return urlencode({**fields, **changes}).encode()


def test_braintree_forgery_wrong_key_and_malformed_material(gateway: Any) -> None:
    body = braintree_form(gateway)
    fields = dict(parse_qsl(body.decode()))
    payload = fields["bt_payload"]
    forged = base64.encodebytes(base64.decodebytes(payload.encode()).replace(b"sub_2", b"sub_3"))
    with pytest.raises(SignatureMismatch):
        run("braintree", BT_SECRET, {}, braintree_form(gateway, bt_payload=forged.decode()))
    with pytest.raises(SignatureMismatch):
        run("braintree", f"{BT_PUBLIC}:{secrets.token_hex(16)}", {}, body)
    with pytest.raises(SignatureMismatch):  # the right key under another public key
        run("braintree", f"otherpublic:{BT_PRIVATE}", {}, body)
    signature = fields["bt_signature"]
    for bad in (
        {"bt_signature": ""},
        {"bt_signature": signature.replace("|", "|zz")},
        {"bt_payload": payload + "<"},
    ):
        with pytest.raises(AuthenticationFailed):
            run("braintree", BT_SECRET, {}, braintree_form(gateway, **bad))
    with pytest.raises(AuthenticationFailed):
        run("braintree", BT_SECRET, {}, urlencode({"bt_payload": payload}).encode())


def test_a_signed_braintree_payload_with_a_dtd_or_not_a_notification_is_a_400() -> None:
    for xml in (
        b'<!DOCTYPE n [<!ENTITY a "aaaa">]><notification><kind>&a;</kind></notification>',
        b"<subscription><id>1</id></subscription>",
        b"<notification><kind>x</kind>",
    ):
        signed = schemes.build("braintree").sign(BT_SECRET, xml, timestamp=NOW)
        with pytest.raises(InvalidPayload):
            run("braintree", BT_SECRET, {}, signed.body)


def test_a_braintree_redelivery_is_the_same_event_another_notification_is_not() -> None:
    body, _ = sample("braintree")
    first = schemes.build("braintree").sign(BT_SECRET, body, timestamp=NOW).body
    again = schemes.build("braintree").sign(BT_SECRET, body, timestamp=NOW + 3600).body
    other = sample("braintree")[0]  # a fresh sample: its own ids
    signed_other = schemes.build("braintree").sign(BT_SECRET, other, timestamp=NOW).body
    keys = [run("braintree", BT_SECRET, {}, b)[0].event_id for b in (first, again, signed_other)]
    assert keys[0] == keys[1] != keys[2]


# --- Microsoft Graph and Okta: a shared value, no signature -------------------------------


def graph_body(*states: str) -> bytes:
    document = json.loads(sample("microsoft-graph")[0])
    item = document["value"][0]
    values = [{**item, "clientState": s, "id": f"n{n}"} for n, s in enumerate(states)]
    return json.dumps({"value": values}).encode()


def test_graph_notifications_with_the_client_state_are_events_stored_without_it() -> None:
    found = run("microsoft-graph", GRAPH_STATE, {}, graph_body(GRAPH_STATE, GRAPH_STATE))
    assert [i.event_type for i in found] == ["created", "created"]
    assert len({i.event_id for i in found}) == 2
    assert all("clientState" not in i.payload for i in found)


@pytest.mark.parametrize("states", [("wrong",), (GRAPH_STATE, "wrong"), (GRAPH_STATE + "x",)])
def test_one_graph_notification_with_another_client_state_refuses_the_delivery(
    states: tuple[str, ...],
) -> None:
    with pytest.raises(SignatureMismatch):
        run("microsoft-graph", GRAPH_STATE, {}, graph_body(*states))


@pytest.mark.parametrize("body", [b"{}", b'{"value": []}', b'{"value": [{}]}', b"nope"])
def test_a_graph_body_without_client_state_is_a_401(body: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        run("microsoft-graph", GRAPH_STATE, {}, body)


def test_graphs_validation_token_is_echoed_decoded_as_text() -> None:
    token = "Validation: Testing client application reachability for subscription Request-Id: 1"
    url = "https://h/webhooks/graph?" + urlencode({"validationToken": token})
    reply = schemes.build("microsoft-graph").handshake(Delivery({}, b"", "POST", url), ["s"])
    assert reply == Reply(token, 200, "text/plain", (("X-Content-Type-Options", "nosniff"),))
    for bad in ("<script>", "x" * 2000, ""):
        url = "https://h/w?" + urlencode({"validationToken": bad})
        with pytest.raises(InvalidPayload):
            schemes.build("microsoft-graph").handshake(Delivery({}, b"", "POST", url), ["s"])


def okta_headers(value: str = OKTA_HEADER) -> dict[str, str]:
    return {"authorization": value}


def test_okta_events_are_keyed_by_their_uuid_and_need_the_header() -> None:
    body, event_type = sample("okta")
    (found,) = run("okta", OKTA_HEADER, okta_headers(), body)
    assert found.event_type == event_type
    assert found.event_id == json.loads(body)["data"]["events"][0]["uuid"]
    assert found.delivery_id == json.loads(body)["eventId"]
    with pytest.raises(SignatureMismatch):
        run("okta", OKTA_HEADER, okta_headers(OKTA_HEADER + "x"), body)
    with pytest.raises(AuthenticationFailed):
        run("okta", OKTA_HEADER, {}, body)
    custom = {"x-okta-auth": OKTA_HEADER}
    assert run("okta", OKTA_HEADER, custom, body, options={"header": "X-Okta-Auth"})


def test_oktas_verification_is_answered_only_with_the_header() -> None:
    okta = schemes.build("okta")
    challenge = {"x-okta-verification-challenge": "abc123-challenge"}
    reply = okta.handshake(Delivery({**challenge, **okta_headers()}, b"", "GET"), [OKTA_HEADER])
    assert reply == Reply.json({"verification": "abc123-challenge"})
    with pytest.raises(SignatureMismatch):
        okta.handshake(Delivery({**challenge, **okta_headers("no")}, b"", "GET"), [OKTA_HEADER])
    with pytest.raises(AuthenticationFailed):
        okta.handshake(Delivery(challenge, b"", "GET"), [OKTA_HEADER])
    assert okta.handshake(Delivery(okta_headers(), b"", "GET"), [OKTA_HEADER]) is None


@pytest.mark.parametrize(
    "body", [b'{"data": {}}', b'{"data": {"events": []}}', b'{"data": {"events": [{}]}}']
)
def test_an_okta_delivery_without_events_is_a_400(body: bytes) -> None:
    with pytest.raises(InvalidPayload):
        run("okta", OKTA_HEADER, okta_headers(), body)
