"""The named presets (Clerk … Telegram) without I/O: each against its sender's own library where
one is published (they sign, we verify; we sign, they verify), else against the documented
algorithm written out here in plain hmac, independently of the scheme code; then forgery, a
wrong secret, missing and malformed headers, stale timestamps and replays, preset by preset."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import razorpay
import standardwebhooks
import stripe
import svix.webhooks
from coinbase_commerce.webhook import WebhookSignature
from openai import InvalidWebhookSignatureError, OpenAI
from polar import webhooks as polar_webhooks

from tests.support import EVENTS_DIR
from webhook_inbox.errors import AuthenticationFailed, SignatureMismatch
from webhook_inbox.ingest import providers, schemes
from webhook_inbox.ingest.schemes import Delivery
from webhook_inbox_tools import sample_events

REGISTRY = providers.load_config_text((EVENTS_DIR / "providers.local.json").read_text())
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # Standard Webhooks' own test secret
STANDARD = ["clerk", "resend", "openai", "replicate", "polar"]
BODY_HMAC = {
    # name: (signature header, prefix, base64?, hash) as each sender documents it
    "intercom": ("X-Hub-Signature", "sha1=", False, hashlib.sha1),
    "bitbucket": ("X-Hub-Signature", "sha256=", False, hashlib.sha256),
    "jira": ("X-Hub-Signature", "sha256=", False, hashlib.sha256),
    "gitea": ("X-Gitea-Signature", "", False, hashlib.sha256),
    "typeform": ("Typeform-Signature", "sha256=", True, hashlib.sha256),
    "sentry": ("Sentry-Hook-Signature", "", False, hashlib.sha256),
    "vercel": ("x-vercel-signature", "", False, hashlib.sha1),
    "lemonsqueezy": ("X-Signature", "", False, hashlib.sha256),
    "razorpay": ("X-Razorpay-Signature", "", False, hashlib.sha256),
    "coinbase-commerce": ("X-CC-Webhook-Signature", "", False, hashlib.sha256),
    "checkout-com": ("Cko-Signature", "", False, hashlib.sha256),
    "cal-com": ("X-Cal-Signature-256", "", False, hashlib.sha256),
    "woocommerce": ("X-WC-Webhook-Signature", "", True, hashlib.sha256),
    "docusign": ("X-DocuSign-Signature-1", "", True, hashlib.sha256),
}
STRIPE_SHAPED = {"calendly": "Calendly-Webhook-Signature", "mux": "Mux-Signature"}
PRESETS = [*STANDARD, *BODY_HMAC, *STRIPE_SHAPED, "zendesk", "telegram"]
TIMESTAMPED = [*STANDARD, *STRIPE_SHAPED, "zendesk"]
# The signing time, set afresh for each test: the senders' libraries check it against their own
# clock, and a whole suite on a busy machine outlasts their five-minute tolerance.
NOW = int(time.time())


@pytest.fixture(autouse=True)
def _now_is_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "NOW", int(time.time()))


def secret_for(name: str) -> str:
    if name in STANDARD and name != "polar":
        return WHSEC
    return "test-polar-secret" if name == "polar" else f"test-{name}-secret"


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def sample(name: str) -> tuple[bytes, str, str | None]:
    """A realistic body of the preset's default type, its type and the id the sample gives."""
    provider = REGISTRY.providers[name]
    catalog = sample_events.catalog(name)
    assert catalog is not None
    built = sample_events.build(provider, catalog.default, now=NOW)
    return built.body, catalog.default, built.event_id


def signed(
    name: str, *, at: int | None = None, event: tuple[bytes, str, str | None] | None = None
) -> tuple[dict[str, str], bytes]:
    """``event`` (default: a fresh sample) signed by our preset at ``at`` (default: NOW)."""
    at = NOW if at is None else at
    body, event_type, event_id = event or sample(name)
    made = schemes.build(name).sign(
        secret_for(name), body, timestamp=at, event_id=event_id or "evt_1", event_type=event_type
    )
    return lower(made.headers), made.body


def documented(name: str, secret: str, body: bytes, at: int, msg_id: str = "msg_1") -> dict:
    """The delivery as the sender's documentation builds it, in plain hmac."""
    if name in BODY_HMAC:
        header, prefix, b64, digest = BODY_HMAC[name]
        mac = hmac.new(secret.encode(), body, digest).digest()
        return {header: prefix + (base64.b64encode(mac).decode() if b64 else mac.hex())}
    if name in STRIPE_SHAPED:
        mac = hmac.new(secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
        return {STRIPE_SHAPED[name]: f"t={at},v1={mac}"}
    if name == "zendesk":
        stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        mac = hmac.new(secret.encode(), stamp.encode() + body, hashlib.sha256).digest()
        return {
            "X-Zendesk-Webhook-Signature": base64.b64encode(mac).decode(),
            "X-Zendesk-Webhook-Signature-Timestamp": stamp,
        }
    if name == "telegram":
        return {"X-Telegram-Bot-Api-Secret-Token": secret}
    key = secret.encode() if name == "polar" else base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{at}.".encode() + body, hashlib.sha256).digest()
    family = "svix" if name in ("clerk", "resend") else "webhook"
    return {
        f"{family}-id": msg_id,
        f"{family}-timestamp": str(at),
        f"{family}-signature": "v1," + base64.b64encode(mac).decode(),
    }


def verify(name: str, headers: dict[str, str], body: bytes, *, now: int | None = None) -> Any:
    now = NOW if now is None else now
    scheme = schemes.build(name)
    return scheme.verify(Delivery(headers, body), [secret_for(name)], now=now, tolerance=300)


# --- the documented algorithm, both ways -----------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_a_delivery_built_as_documented_verifies_and_ours_is_the_same(name: str) -> None:
    body, event_type, _ = sample(name)
    theirs = documented(name, secret_for(name), body, NOW)
    verify(name, lower(theirs), body)
    ours = schemes.build(name).sign(
        secret_for(name), body, timestamp=NOW, event_id="msg_1", event_type=event_type
    )
    for header, value in theirs.items():  # every header the documentation names, same value
        assert lower(ours.headers)[header.lower()] == value, header


# --- the senders' own libraries --------------------------------------------------------------


def at_now() -> datetime:
    return datetime.fromtimestamp(NOW, UTC)


@pytest.mark.parametrize("name", ["clerk", "resend"])
def test_svix_signs_what_clerk_and_resend_verify_and_verifies_what_they_sign(name: str) -> None:
    event = body, _, msg_id = sample(name)
    assert msg_id is not None
    theirs = svix.webhooks.Webhook(WHSEC).sign(msg_id, at_now(), body.decode())
    headers = {"svix-id": msg_id, "svix-timestamp": str(NOW), "svix-signature": theirs}
    assert verify(name, headers, body).signed_id == msg_id
    ours, _ = signed(name, event=event)
    assert set(ours) == {"svix-id", "svix-timestamp", "svix-signature"}
    svix.webhooks.Webhook(WHSEC).verify(body, ours)


def test_openais_library_and_ours_agree_both_ways() -> None:
    event = body, _, msg_id = sample("openai")
    headers, _ = signed("openai", event=event)
    client = OpenAI(api_key="not-used", webhook_secret=WHSEC)
    client.webhooks.verify_signature(body, headers, secret=WHSEC)  # raises on a mismatch
    with pytest.raises(InvalidWebhookSignatureError):
        client.webhooks.verify_signature(body + b" ", headers, secret=WHSEC)
    verify("openai", documented("openai", WHSEC, body, NOW, msg_id or "msg_1"), body)


def test_the_standardwebhooks_library_and_our_replicate_preset_agree_both_ways() -> None:
    event = body, _, _ = sample("replicate")
    theirs = standardwebhooks.Webhook(WHSEC).sign("msg_r", at_now(), body.decode())
    headers = {"webhook-id": "msg_r", "webhook-timestamp": str(NOW), "webhook-signature": theirs}
    assert verify("replicate", headers, body).signed_id == "msg_r"
    ours, _ = signed("replicate", event=event)
    standardwebhooks.Webhook(WHSEC).verify(body, ours)


def test_polars_sdk_verifies_ours_and_we_verify_a_whsec_secret_in_both_of_its_forms() -> None:
    event = body, event_type, _ = sample("polar")
    headers, _ = signed("polar", event=event)
    checked = polar_webhooks.validate_event(
        body, headers, "test-polar-secret", frozenset({event_type}), lambda data: data
    )
    assert checked["type"] == event_type
    # Polar's SDK also reads a whsec_ secret as base64: a delivery keyed either way verifies.
    raw = base64.b64decode(WHSEC.removeprefix("whsec_"))
    for key in (WHSEC.encode(), raw):
        mac = hmac.new(key, f"m.{NOW}.".encode() + body, hashlib.sha256).digest()
        sig = {"webhook-id": "m", "webhook-timestamp": str(NOW),
               "webhook-signature": "v1," + base64.b64encode(mac).decode()}  # fmt: skip
        schemes.build("polar").verify(Delivery(sig, body), [WHSEC], now=NOW, tolerance=300)


def test_razorpays_sdk_verifies_ours_and_rejects_a_changed_body() -> None:
    event = body, _, _ = sample("razorpay")
    signature = signed("razorpay", event=event)[0]["x-razorpay-signature"]
    utility, secret = razorpay.Utility(None), secret_for("razorpay")
    assert utility.verify_webhook_signature(body.decode(), signature, secret)
    with pytest.raises(razorpay.errors.SignatureVerificationError):
        utility.verify_webhook_signature(body.decode() + " ", signature, secret)


def test_coinbase_commerces_sdk_and_ours_agree_both_ways() -> None:
    event = body, _, _ = sample("coinbase-commerce")
    secret = secret_for("coinbase-commerce")
    signature = signed("coinbase-commerce", event=event)[0]["x-cc-webhook-signature"]
    assert WebhookSignature.verify_sig_header(body.decode(), signature, secret)
    theirs = WebhookSignature._compute_signature(body.decode(), secret)
    verify("coinbase-commerce", {"x-cc-webhook-signature": theirs}, body)


@pytest.mark.parametrize("name", list(STRIPE_SHAPED))
def test_stripes_library_builds_the_calendly_and_mux_construction(name: str) -> None:
    event = body, _, _ = sample(name)
    secret, header = secret_for(name), STRIPE_SHAPED[name].lower()
    theirs = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=NOW)
    verify(name, {header: theirs}, body)
    ours, _ = signed(name, event=event)
    assert stripe.WebhookSignature.verify_header(body, ours[header], secret, 300)


# --- what every preset refuses ---------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in PRESETS if n != "telegram"])
def test_a_forged_body_is_refused(name: str) -> None:
    headers, body = signed(name)
    forged = body.replace(b'"', b"'", 1)  # one byte
    with pytest.raises(SignatureMismatch):
        verify(name, headers, forged)


@pytest.mark.parametrize("name", PRESETS)
def test_a_wrong_secret_is_a_mismatch(name: str) -> None:
    headers, body = signed(name)
    other = WHSEC[:-4] + "AAAA" if secret_for(name) == WHSEC else secret_for(name) + "x"
    with pytest.raises(SignatureMismatch):
        schemes.build(name).verify(Delivery(headers, body), [other], now=NOW, tolerance=300)


@pytest.mark.parametrize("name", PRESETS)
def test_without_any_one_authenticating_header_it_is_a_401(name: str) -> None:
    headers, body = signed(name)
    authenticating = [h for h in headers if any(w in h for w in ("sig", "token", "timestamp"))]
    authenticating += [h for h in headers if h in ("webhook-id", "svix-id")]
    assert authenticating
    for missing in authenticating:
        with pytest.raises(AuthenticationFailed) as failure:
            verify(name, {k: v for k, v in headers.items() if k != missing}, body)
        assert failure.value.reason == "signature", missing


@pytest.mark.parametrize("name", [n for n in PRESETS if n != "telegram"])
@pytest.mark.parametrize("garble", ["", "sha256=", "v1,", "t=1,v1=", "zz" * 32, "=" * 44, "\x00"])
def test_a_garbled_signature_is_a_401(name: str, garble: str) -> None:
    headers, body = signed(name)
    header = next(h for h in headers if "signature" in h and "timestamp" not in h)
    with pytest.raises(AuthenticationFailed):
        verify(name, {**headers, header: garble}, body)


@pytest.mark.parametrize("name", TIMESTAMPED)
@pytest.mark.parametrize(
    ("offset", "fresh"), [(300, True), (-300, True), (301, False), (-301, False)]
)
def test_the_window_is_300_seconds_both_ways(name: str, offset: int, fresh: bool) -> None:
    headers, body = signed(name, at=NOW - offset)  # signed `offset` seconds before our clock
    if fresh:
        verify(name, headers, body)
    else:
        with pytest.raises(AuthenticationFailed) as failure:
            verify(name, headers, body)
        assert failure.value.reason == "stale"


@pytest.mark.parametrize("name", PRESETS)
def test_a_redelivery_signed_again_later_is_the_same_event(name: str) -> None:
    """What deduplication rests on: a retry (the same event, signed anew a minute later, with
    DocuSign's retryCount bumped) has the key of the first delivery."""
    body, event_type, event_id = sample(name)
    keys = set()
    for attempt in range(2):
        if attempt and name == "docusign":
            body = json.dumps({**json.loads(body), "retryCount": attempt}).encode()
        at = NOW + 60 * attempt
        headers, sent = signed(name, at=at, event=(body, event_type, event_id))
        scheme = schemes.build(name)
        delivery = Delivery(headers, sent)
        found = scheme.identify(
            delivery, scheme.parse(delivery), verify(name, headers, sent, now=at)
        )
        assert isinstance(found, list)
        assert [i.event_type for i in found] == [event_type]
        keys |= {i.event_id for i in found}
    assert len(keys) == 1, keys
