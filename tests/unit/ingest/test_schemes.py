"""Signature schemes without I/O: DESIGN §5 known answers, official libraries as oracles both
ways (they sign → we verify; we sign → they verify), strict decoding, tolerance boundaries."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import standardwebhooks
import stripe
import svix.webhooks
from slack_sdk.signature import SignatureVerifier

from tests.support import EVENTS_DIR, ROOT
from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, SignatureMismatch
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.providers import load_config_text, parse_config, sign_delivery
from webhook_inbox.ingest.schemes import Delivery

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TS = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

GH_SECRET = "It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_HEX = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

STRIPE_SECRET = "whsec_test_stripe_secret"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


# --- known answers ------------------------------------------------------------------------


def test_standard_webhooks_known_answer_signs_and_verifies() -> None:
    scheme = schemes.StandardWebhooks()
    headers = scheme.sign(SW_SECRET, SW_BODY, event_id=SW_ID, timestamp=SW_TS).headers
    assert headers["webhook-signature"] == SW_SIGNATURE
    verified = scheme.verify(Delivery(headers, SW_BODY), [SW_SECRET], now=SW_TS, tolerance=300)
    assert verified.signed_id == SW_ID


def test_github_known_answer_signs_and_verifies() -> None:
    scheme = schemes.GitHub()
    headers = lower(scheme.sign(GH_SECRET, GH_BODY, event_id=None, timestamp=0).headers)
    assert headers["x-hub-signature-256"] == f"sha256={GH_HEX}"
    scheme.verify(Delivery(headers, GH_BODY), [GH_SECRET], now=0, tolerance=300)


def test_shopify_signature_is_base64_hmac_of_the_body() -> None:
    secret, body = "hush", b'{"id":1}'
    expected = base64.b64encode(hmac.new(b"hush", body, hashlib.sha256).digest()).decode()
    headers = lower(schemes.Shopify().sign(secret, body, event_id="w1", timestamp=0).headers)
    assert headers["x-shopify-hmac-sha256"] == expected
    schemes.Shopify().verify(Delivery(headers, body), [secret], now=0, tolerance=300)


# --- official libraries as oracles --------------------------------------------------------


def test_standardwebhooks_library_and_ours_agree_both_ways() -> None:
    now = int(time.time())
    body = b'{"type":"invoice.paid","data":{"n":1}}'
    theirs = standardwebhooks.Webhook(SW_SECRET).sign(
        "msg_1", datetime.fromtimestamp(now, tz=UTC), body.decode()
    )
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(now), "webhook-signature": theirs}
    schemes.StandardWebhooks().verify(Delivery(headers, body), [SW_SECRET], now=now, tolerance=300)
    ours = schemes.StandardWebhooks().sign(SW_SECRET, body, event_id="msg_2", timestamp=now).headers
    standardwebhooks.Webhook(SW_SECRET).verify(body, ours)


def test_svix_library_and_ours_agree_both_ways_with_svix_headers() -> None:
    now = int(time.time())
    body = b'{"type":"user.created"}'
    theirs = svix.webhooks.Webhook(SW_SECRET).sign(
        "msg_s", datetime.fromtimestamp(now, tz=UTC), body.decode()
    )
    headers = {"svix-id": "msg_s", "svix-timestamp": str(now), "svix-signature": theirs}
    assert (
        schemes.StandardWebhooks().verify(
            Delivery(headers, body), [SW_SECRET], now=now, tolerance=300
        )
    ).signed_id == "msg_s"
    svix_scheme = schemes.StandardWebhooks({"header_prefix": "svix"})
    ours = svix_scheme.sign(SW_SECRET, body, event_id="msg_t", timestamp=now).headers
    assert set(ours) == {"svix-id", "svix-timestamp", "svix-signature"}
    svix.webhooks.Webhook(SW_SECRET).verify(body, ours)


def test_stripe_library_and_ours_agree_both_ways() -> None:
    now = int(time.time())
    body = b'{"id":"evt_1","type":"customer.created"}'
    theirs = stripe.WebhookSignature.generate_signature_header(
        body.decode(), STRIPE_SECRET, timestamp=now
    )
    schemes.Stripe().verify(
        Delivery({"stripe-signature": theirs}, body), [STRIPE_SECRET], now=now, tolerance=300
    )
    ours = schemes.Stripe().sign(STRIPE_SECRET, body, event_id=None, timestamp=now).headers
    assert stripe.WebhookSignature.verify_header(
        body, ours["Stripe-Signature"], STRIPE_SECRET, tolerance=300
    )


def test_slack_sdk_and_ours_agree_both_ways() -> None:
    now = int(time.time())
    body = b'{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention"}}'
    verifier = SignatureVerifier(SLACK_SECRET)
    theirs = verifier.generate_signature(timestamp=str(now), body=body)
    assert theirs is not None
    headers = {"x-slack-request-timestamp": str(now), "x-slack-signature": theirs}
    schemes.Slack().verify(Delivery(headers, body), [SLACK_SECRET], now=now, tolerance=300)
    ours = schemes.Slack().sign(SLACK_SECRET, body, event_id=None, timestamp=now).headers
    assert verifier.is_valid_request(body, ours)


# --- strictness ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "",
        "v1",
        "v1,",
        "v1,not-base64!",
        "v1," + SW_SIGNATURE[3:-1],  # truncated
        "v1," + SW_SIGNATURE[3:] + "AAAA",  # trailing data
        "v2," + SW_SIGNATURE[3:],  # only unknown versions
        " ".join([SW_SIGNATURE] * 17),  # too many entries
    ],
)
def test_standard_webhooks_rejects_malformed_signature_headers(header: str) -> None:
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TS), "webhook-signature": header}
    with pytest.raises(AuthenticationFailed):
        schemes.StandardWebhooks().verify(
            Delivery(headers, SW_BODY), [SW_SECRET], now=SW_TS, tolerance=300
        )


def test_standard_webhooks_accepts_any_v1_entry_and_ignores_other_versions() -> None:
    # v1a (Ed25519) entries are decoded strictly too, but match no HMAC secret; v2 is unknown.
    v1a = "v1a," + base64.b64encode(b"s" * 64).decode()
    header = f"v2,AAAA {v1a} v1,{base64.b64encode(b'x' * 32).decode()} {SW_SIGNATURE}"
    headers = {"webhook-id": SW_ID, "webhook-timestamp": str(SW_TS), "webhook-signature": header}
    schemes.StandardWebhooks().verify(
        Delivery(headers, SW_BODY), [SW_SECRET], now=SW_TS, tolerance=300
    )


@pytest.mark.parametrize(
    "header",
    [
        "t=1,t=1,v1=" + "0" * 64,  # two timestamps
        "v1=" + "0" * 64,  # no timestamp
        "t=abc,v1=" + "0" * 64,
        "t=1,v1=" + "0" * 63,
        "t=1,v1=" + "g" * 64,
        "t=1,v0=" + "0" * 64,  # no v1
        "t=1;v1=" + "0" * 64,
    ],
)
def test_stripe_rejects_malformed_signature_headers(header: str) -> None:
    with pytest.raises(AuthenticationFailed):
        schemes.Stripe().verify(
            Delivery({"stripe-signature": header}, b"{}"), [STRIPE_SECRET], now=1, tolerance=300
        )


def test_wrong_secret_is_a_mismatch_not_a_format_error() -> None:
    headers = lower(schemes.GitHub().sign("right", b"{}", event_id=None, timestamp=0).headers)
    with pytest.raises(SignatureMismatch):
        schemes.GitHub().verify(Delivery(headers, b"{}"), ["wrong"], now=0, tolerance=300)


@pytest.mark.parametrize("offset", [-300, 300, -301, 301])
def test_tolerance_is_inclusive_and_applies_both_ways(offset: int) -> None:
    now = 1_700_000_000
    body = b'{"id":"evt","type":"t"}'
    headers = lower(
        schemes.Stripe().sign(STRIPE_SECRET, body, event_id=None, timestamp=now).headers
    )
    verify_at = now - offset  # the delivery's timestamp is `offset` seconds from our clock
    if abs(offset) <= 300:
        schemes.Stripe().verify(
            Delivery(headers, body), [STRIPE_SECRET], now=verify_at, tolerance=300
        )
    else:
        with pytest.raises(AuthenticationFailed) as info:
            schemes.Stripe().verify(
                Delivery(headers, body), [STRIPE_SECRET], now=verify_at, tolerance=300
            )
        assert info.value.reason == "stale"


def test_generic_hmac_signs_the_configured_template() -> None:
    scheme = schemes.GenericHmac(
        {
            "signature_header": "X-Sig",
            "encoding": "base64",
            "prefix": "v1=",
            "timestamp_header": "X-Ts",
            "id_header": "X-Id",
            "signed_content": "{id}:{timestamp}:{body}",
        }
    )
    body = b'{"type":"a"}'
    headers = scheme.sign("k", body, event_id="e1", timestamp=42).headers
    digest = hmac.new(b"k", b"e1:42:" + body, hashlib.sha256).digest()
    assert headers == {
        "X-Sig": "v1=" + base64.b64encode(digest).decode(),
        "X-Ts": "42",
        "X-Id": "e1",
    }
    verified = scheme.verify(Delivery(lower(headers), body), ["k"], now=42, tolerance=10)
    (identity,) = scheme.identify(Delivery(headers, body), json.loads(body), verified)
    assert (identity.event_id, identity.event_type, identity.delivery_id) == ("e1", "a", None)


def test_generic_hmac_unsigned_id_header_is_informational_only() -> None:
    scheme = schemes.GenericHmac({"signature_header": "X-Sig", "id_header": "X-Id"})
    body = b'{"type":"a"}'
    headers = lower(scheme.sign("k", body, event_id="e1", timestamp=0).headers)
    verified = scheme.verify(Delivery(headers, body), ["k"], now=0, tolerance=10)
    (identity,) = scheme.identify(Delivery(headers, body), json.loads(body), verified)
    assert identity.event_id == "sha256:" + hashlib.sha256(b"a\x00" + body).hexdigest()
    assert identity.delivery_id == "e1"


def test_github_type_is_event_header_refined_by_action_and_id_is_the_body_digest() -> None:
    body = b'{"action":"opened","issue":{"number":1}}'
    headers = lower(
        schemes.GitHub().sign("s", body, event_id="d-1", timestamp=0, event_type="issues").headers
    )
    (identity,) = schemes.GitHub().identify(
        Delivery(headers, body), json.loads(body), schemes.Verified()
    )
    assert identity.event_type == "issues.opened"
    assert identity.event_id == "sha256:" + hashlib.sha256(b"issues.opened\x00" + body).hexdigest()
    assert identity.delivery_id == "d-1"


def test_slack_url_verification_is_answered_not_stored() -> None:
    payload: dict[str, Any] = {"type": "url_verification", "challenge": "abc", "token": "t"}
    reply = schemes.Slack().identify(Delivery({}, b""), payload, schemes.Verified())
    assert reply == schemes.Reply('{"challenge":"abc"}', 200, "application/json")


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"providers": []},
        {"providers": {"Bad Name": {"scheme": "stripe", "secrets": [{"value": "x"}]}}},
        {"providers": {"p": {"scheme": "nope", "secrets": [{"value": "x"}]}}},
        {"providers": {"p": {"scheme": "stripe", "secrets": []}}},
        {"providers": {"p": {"scheme": "stripe", "secrets": [{"value": "x", "env": "Y"}]}}},
        {"providers": {"p": {"scheme": "stripe", "secrets": [{"value": "x"}], "typo": 1}}},
        {
            "providers": {
                "p": {"scheme": "stripe", "secrets": [{"value": "x"}], "options": {"a": 1}}
            }
        },
        {"providers": {"p": {"scheme": "stripe", "secrets": ["x"]}}},
        {
            "providers": {
                "p": {"scheme": "stripe", "secrets": [{"value": "x"}], "tolerance_seconds": 0}
            }
        },
        {"providers": {"p": {"scheme": "hmac-sha256", "secrets": [{"value": "x"}]}}},
        {
            "providers": {
                "p": {
                    "scheme": "hmac-sha256",
                    "secrets": [{"value": "x"}],
                    "options": {"signature_header": "X-S", "signed_content": "{id}.{body}"},
                }
            }
        },
        {"providers": {"p": {"scheme": "standard-webhooks", "secrets": [{"value": "whsec_!!"}]}}},
    ],
)
def test_invalid_configurations_are_refused_at_load(config: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        parse_config(config)


def test_toml_configuration_is_accepted() -> None:
    text = """
[providers.acme]
scheme = "hmac-sha256"
secrets = [{ value = "dev-only" }]
options = { signature_header = "X-Sig", id_path = "id" }
"""
    registry = load_config_text(text, toml=True)
    headers = sign_delivery(registry["acme"], b'{"id":"1","type":"t"}').headers
    assert headers["X-Sig"] == hmac.new(b"dev-only", b'{"id":"1","type":"t"}', "sha256").hexdigest()


def _stripe_header(timestamp_text: str, body: bytes) -> dict[str, str]:
    mac = hmac.new(STRIPE_SECRET.encode(), f"{timestamp_text}.".encode() + body, hashlib.sha256)
    return {"stripe-signature": f"t={timestamp_text},v1={mac.hexdigest()}"}


def test_a_timestamp_must_be_canonical_even_when_signed_so() -> None:
    # Leading zeros keep the value but change the signed text; refusing them makes the text
    # one-to-one with the value (issue 12's audit: see test_signed_content_template.py).
    now = int(time.time())
    body = b'{"id":"evt_1","type":"t"}'
    stripe_scheme = schemes.Stripe()
    assert (
        stripe_scheme.verify(
            Delivery(_stripe_header(str(now), body), body), [STRIPE_SECRET], now=now, tolerance=300
        ).timestamp
        == now
    )
    with pytest.raises(AuthenticationFailed, match="canonical") as failure:
        stripe_scheme.verify(
            Delivery(_stripe_header(f"0{now}", body), body), [STRIPE_SECRET], now=now, tolerance=300
        )
    assert failure.value.reason == "signature"


def test_content_digest_id_ignores_spacing_order_and_the_named_fields() -> None:
    one = json.loads('{"a": 1, "attemptNumber": 0, "b": {"y": 2, "x": "é"}}')
    two = json.loads('{"b":{"x":"é","y":2},"attemptNumber":3,"a":1}')
    key = schemes.content_digest_id("t", one, without=("attemptNumber",))
    assert key == schemes.content_digest_id("t", two, without=("attemptNumber",))
    assert key.startswith("sha256:")
    assert len(key) == 7 + 64
    assert key != schemes.content_digest_id("u", one, without=("attemptNumber",))
    assert key != schemes.content_digest_id("t", one, without=())
    assert key != schemes.content_digest_id("t", {**one, "a": 2}, without=("attemptNumber",))


@pytest.mark.parametrize(
    ("count", "fresh"),
    [
        (1_700_000_060_000, True),  # exactly +60 s
        (1_700_000_060_001, False),  # 1 ms beyond: refused, not rounded down to +60 s
        (1_699_999_940_000, True),  # exactly -60 s
        (1_699_999_939_999, False),  # 1 ms beyond in the past
        (1_700_000_000_500, True),
    ],
)
def test_subsecond_timestamps_are_held_to_the_tolerance_exactly(count: int, fresh: bool) -> None:
    from webhook_inbox.ingest.schemes.base import check_fresh_subsecond

    if fresh:
        seconds = check_fresh_subsecond(count, 1000, 1_700_000_000, 60)
        assert abs(seconds * 1000 - count) < 1000
    else:
        with pytest.raises(AuthenticationFailed) as info:
            check_fresh_subsecond(count, 1000, 1_700_000_000, 60)
        assert info.value.reason == "stale"


def _scheme_table() -> list[list[str]]:
    """The cells of docs/providers.md's scheme table, one list per row."""
    page = (ROOT / "docs" / "providers.md").read_text()
    section = page.split("\n## Signature schemes\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def test_the_providers_page_has_a_scheme_table_row_for_every_scheme() -> None:
    rows = _scheme_table()
    names = [row[0].split("`")[1] for row in rows]  # `standard-webhooks` (v1a) -> standard-webhooks
    assert sorted(set(names)) == sorted(schemes.SCHEMES)
    # One row each; standard-webhooks has a second for its v1a (Ed25519) signatures.
    assert sorted(names) == sorted([*schemes.SCHEMES, "standard-webhooks"])
    # Six cells each, the fifth ("id signed?") filled in.
    assert [
        name for name, row in zip(names, rows, strict=True) if len(row) != 6 or not row[4]
    ] == []


def test_the_sample_configuration_has_a_provider_for_every_scheme() -> None:
    registry = load_config_text((EVENTS_DIR / "providers.local.json").read_text())
    configured = {provider.scheme.name for provider in registry.providers.values()}
    assert configured == set(schemes.SCHEMES)


@pytest.mark.parametrize(
    ("age", "said"),
    [(96_191_534, "96191534s in the past"), (-400, "400s in the future")],
    ids=["three-years-old", "from-the-future"],
)
def test_a_stale_timestamp_says_which_way_it_is_off(age: int, said: str) -> None:
    # Issue 29: a three-year-old timestamp was reported as "+96191534s from now".
    now = 1_700_000_000
    body = b'{"id":"evt","type":"t"}'
    headers = lower(
        schemes.Stripe().sign(STRIPE_SECRET, body, event_id=None, timestamp=now - age).headers
    )
    with pytest.raises(AuthenticationFailed) as info:
        schemes.Stripe().verify(Delivery(headers, body), [STRIPE_SECRET], now=now, tolerance=300)
    assert info.value.detail == f"timestamp {said}, tolerance 300s"
