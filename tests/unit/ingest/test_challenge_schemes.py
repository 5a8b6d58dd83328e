"""Body-HMAC senders with a handshake (Meta, WhatsApp, X, Dropbox, Asana, Xero), without I/O.

None of them publishes a verifying library on PyPI, so the oracle is each one's documented
algorithm written out here in plain hmac, independently of the scheme code: the delivery as the
sender builds it verifies, and ours carries the same header. Then each handshake is answered
only as allowed, and forgery, a wrong secret, missing and garbled headers and redeliveries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest

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
SECRET = "test-handshake-secret"  # made up for these tests
NOSNIFF = (("X-Content-Type-Options", "nosniff"),)
# name: (signature header, prefix, base64?) as each sender documents it; all HMAC-SHA256 of the body
DOCUMENTED = {
    "meta": ("X-Hub-Signature-256", "sha256=", False),
    "whatsapp": ("X-Hub-Signature-256", "sha256=", False),
    "x": ("X-Twitter-Webhooks-Signature", "sha256=", True),
    "dropbox": ("X-Dropbox-Signature", "", False),
    "asana": ("X-Hook-Signature", "", False),
    "xero": ("x-xero-signature", "", True),
}
NAMES = list(DOCUMENTED)


def scheme(name: str, **options: Any) -> schemes.Scheme:
    if name in ("meta", "whatsapp"):
        options.setdefault("verify_token", "test-verify-token")
    return schemes.build(name, options)


def sample(name: str) -> tuple[bytes, str]:
    catalog = sample_events.catalog(name)
    assert catalog is not None
    built = sample_events.build(REGISTRY.providers[name], catalog.default, now=NOW)
    return built.body, catalog.default


def documented(name: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    header, prefix, b64 = DOCUMENTED[name]
    mac = hmac.new(secret.encode(), body, hashlib.sha256).digest()
    return {header.lower(): prefix + (base64.b64encode(mac).decode() if b64 else mac.hex())}


def identify(name: str, headers: dict[str, str], body: bytes, secret: str = SECRET) -> Any:
    chosen = scheme(name)
    delivery = Delivery(headers, body)
    verified = chosen.verify(delivery, [secret], now=NOW, tolerance=300)
    return chosen.identify(delivery, chosen.parse(delivery), verified)


def get(url_query: dict[str, str], headers: dict[str, str] | None = None) -> Delivery:
    return Delivery(headers or {}, b"", "GET", "https://h/webhooks/p?" + urlencode(url_query))


@pytest.mark.parametrize("name", NAMES)
def test_the_documented_delivery_verifies_and_ours_is_the_same(name: str) -> None:
    body, event_type = sample(name)
    found = identify(name, documented(name, body), body)
    assert [i.event_type for i in found] == [event_type]
    ours = scheme(name).sign(SECRET, body, timestamp=NOW)
    assert {k.lower(): v for k, v in ours.headers.items()} == documented(name, body)


@pytest.mark.parametrize("name", NAMES)
def test_a_forged_body_or_a_wrong_secret_is_a_mismatch(name: str) -> None:
    body, _ = sample(name)
    with pytest.raises(SignatureMismatch):
        identify(name, documented(name, body), body.replace(b'"', b"'", 1))
    with pytest.raises(SignatureMismatch):
        identify(name, documented(name, body, SECRET + "x"), body)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("garble", [None, "", "sha256=", "zz" * 32, "=" * 44, "\x00"])
def test_a_missing_or_garbled_signature_is_a_401(name: str, garble: str | None) -> None:
    body, _ = sample(name)
    headers = documented(name, body)
    (header,) = headers
    headers = {} if garble is None else {header: garble}
    with pytest.raises(AuthenticationFailed) as failure:
        identify(name, headers, body)
    assert failure.value.reason == "signature"


@pytest.mark.parametrize("name", NAMES)
def test_a_redelivery_is_the_same_event_a_new_sample_is_not(name: str) -> None:
    """No sender here signs a timestamp or an id: a redelivery (the same bytes, any time later)
    has the first one's key, and is only deduplicated."""
    body, _ = sample(name)
    first = {i.event_id for i in identify(name, documented(name, body), body)}
    again = {i.event_id for i in identify(name, documented(name, body), body)}
    other_body, _ = sample(name)
    other = {i.event_id for i in identify(name, documented(name, other_body), other_body)}
    assert first == again
    assert not first & other


# --- handshakes ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["meta", "whatsapp"])
def test_meta_echoes_hub_challenge_only_for_its_verify_token(name: str) -> None:
    query = {"hub.mode": "subscribe", "hub.challenge": "1158201444", "hub.verify_token": ""}
    ask = lambda token, **options: scheme(name, **options).handshake(  # noqa: E731
        get({**query, "hub.verify_token": token}), [SECRET]
    )
    assert ask("test-verify-token") == Reply("1158201444", 200, "text/plain", NOSNIFF)
    for wrong in ("", "test-verify-toke", "test-verify-token ", SECRET):
        with pytest.raises(AuthenticationFailed):
            ask(wrong)
    with pytest.raises(AuthenticationFailed):  # no verify_token configured: nothing matches
        schemes.build(name).handshake(get(query), [SECRET])
    with pytest.raises(InvalidPayload):
        scheme(name).handshake(get({**query, "hub.mode": "unsubscribe"}), [SECRET])
    with pytest.raises(InvalidPayload):  # markup is not a challenge Meta sends
        scheme(name).handshake(
            get({**query, "hub.verify_token": "test-verify-token", "hub.challenge": "<b>"}),
            [SECRET],
        )
    # A POST with the same query string is a delivery: verified, not answered.
    post = Delivery({}, b"", "POST", "https://h/w?" + urlencode(query))
    assert scheme(name).handshake(post, [SECRET]) is None


def test_xs_crc_answer_is_the_documented_hmac_of_the_token() -> None:
    reply = scheme("x").handshake(get({"crc_token": "cmFuZG9tLXRva2Vu"}), [SECRET, "older"])
    mac = hmac.new(SECRET.encode(), b"cmFuZG9tLXRva2Vu", hashlib.sha256).digest()
    assert reply == Reply.json({"response_token": "sha256=" + base64.b64encode(mac).decode()})


@pytest.mark.parametrize("token", ['{"for_user_id":"1"}', "[1]", "", "a b", "x" * 600])
def test_xs_crc_refuses_a_token_whose_hmac_could_sign_a_body(token: str) -> None:
    """The CRC is an HMAC oracle for anyone: a JSON object or array (what a body is) is never
    keyed, so its answer cannot be replayed as a delivery's signature."""
    with pytest.raises(InvalidPayload):
        scheme("x").handshake(get({"crc_token": token}), [SECRET])


def test_dropbox_echoes_its_challenge_as_plain_text() -> None:
    reply = scheme("dropbox").handshake(get({"challenge": "dropbox-challenge-1"}), [SECRET])
    assert reply == Reply("dropbox-challenge-1", 200, "text/plain", NOSNIFF)
    with pytest.raises(InvalidPayload):
        scheme("dropbox").handshake(get({"challenge": "<html>"}), [SECRET])
    assert scheme("dropbox").handshake(get({}), [SECRET]) is None  # a GET to verify: a 401


def test_asana_echoes_a_hook_secret_it_already_holds_and_refuses_any_other() -> None:
    asana = scheme("asana")
    reply = asana.handshake(Delivery({"X-Hook-Secret": SECRET}, b""), [SECRET])
    assert reply == Reply("", 200, "text/plain", (("X-Hook-Secret", SECRET),))
    with pytest.raises(AuthenticationFailed):
        asana.handshake(Delivery({"X-Hook-Secret": "attacker-chosen"}, b""), [SECRET])
    # Not a handshake: a signed delivery that happens to carry the header too.
    signed = {"X-Hook-Secret": "x", "X-Hook-Signature": "00"}
    assert asana.handshake(Delivery(signed, b""), [SECRET]) is None


def test_asana_with_accept_handshake_stores_the_secret_as_an_event_and_echoes_it() -> None:
    asana = scheme("asana", accept_handshake=True)
    delivery = Delivery({"X-Hook-Secret": "new-secret-from-asana"}, b"")
    assert asana.handshake(delivery, [SECRET]) is None  # to verify(), which lets it through
    verified = asana.verify(delivery, [SECRET], now=NOW, tolerance=300)
    (found,) = asana.identify(delivery, verified.payload, verified)
    assert (found.event_type, found.payload) == (
        "handshake",
        {"x_hook_secret": "new-secret-from-asana"},
    )
    answer = asana.acknowledge(found.payload, new=True)
    assert answer is not None
    assert answer.headers == (("X-Hook-Secret", "new-secret-from-asana"),)
    # A signed body shaped like that stored payload is no handshake: a 400.
    body = b'{"x_hook_secret": "s"}'
    with pytest.raises(InvalidPayload):
        identify("asana", documented("asana", body), body)


def test_asanas_heartbeat_and_xeros_intent_to_receive_store_nothing() -> None:
    body = b'{"events":[]}'
    assert identify("asana", documented("asana", body), body) == Reply.json({"status": "heartbeat"})
    intent = json.dumps({"events": [], "firstEventSequence": 0, "lastEventSequence": 0,
                         "entropy": "S0m3r4Nd0mt3xt"}).encode()  # fmt: skip
    assert identify("xero", documented("xero", intent), intent) == Reply("", 200, "text/plain")
    with pytest.raises(SignatureMismatch):  # incorrectly signed: Xero wants a 401
        identify("xero", documented("xero", intent, "wrong-key"), intent)


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("meta", b'{"object": "page"}'),
        ("meta", b'{"entry": [{}]}'),
        ("x", b'{"for_user_id": "1"}'),
        ("dropbox", b'{"delta": {}}'),
        ("asana", b'{"events": [{"action": "changed"}]}'),
        ("xero", b'{"events": [{"eventType": "UPDATE"}]}'),
        ("xero", b'{"events": "x"}'),
    ],
)
def test_a_signed_body_that_is_not_an_event_is_a_400(name: str, body: bytes) -> None:
    with pytest.raises(InvalidPayload):
        identify(name, documented(name, body), body)


def test_meta_options_are_checked_when_the_configuration_loads() -> None:
    for options in ({"verify_token": ""}, {"verify_token": 1}, {"signature_header": "x"}):
        config = {"providers": {"m": {"scheme": "meta", "secrets": [{"value": "s"}],
                                      "options": options}}}  # fmt: skip
        with pytest.raises(ConfigurationError, match="provider 'm'"):
            providers.parse_config(config)


@pytest.mark.parametrize(
    ("name", "delivery"),
    [
        ("x", get({"crc_token": "abc"})),
        ("dropbox", get({"challenge": "abc"})),
        ("asana", Delivery({"X-Hook-Secret": SECRET}, b"")),
    ],
)
def test_a_provider_whose_every_secret_expired_answers_no_handshake(
    name: str, delivery: Delivery
) -> None:
    """As for a delivery: a 401 that says so (no_live_secret), not a crash on no secret."""
    expired = {"value": SECRET, "expires_at": "2020-01-01T00:00:00Z"}
    config = {"providers": {"p": {"scheme": name, "secrets": [expired]}}}
    provider = providers.parse_config(config)["p"]
    with pytest.raises(AuthenticationFailed) as refused:
        provider.handshake(delivery, now=NOW)
    assert refused.value.reason == "no_live_secret"
