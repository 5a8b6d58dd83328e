"""GitLab without I/O: the documented behaviour of the secret token (sent verbatim in
``X-Gitlab-Token``) and of the newer signing token, which is Standard Webhooks v1: checked with
the Standard Webhooks known answer (DESIGN §5) and the ``standardwebhooks`` library as oracle."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest
import standardwebhooks

from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    SignatureMismatch,
)
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.providers import parse_config
from webhook_inbox.ingest.schemes import Delivery

TOKEN = "gitlab-unit-secret-token"
PUSH = b'{"object_kind":"push","ref":"refs/heads/main","after":"da1560886d4f094c3e6c9ef4034"}'
GITLAB = schemes.GitLab()
SIGNED = schemes.GitLab({"auth": "signing-token"})
# Standard Webhooks' known answer (the signing token's algorithm).
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TS = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def gitlab_headers(token: str = TOKEN, **extra: str) -> dict[str, str]:
    return {"x-gitlab-token": token, "x-gitlab-event": "Push Hook", **extra}


def verify(
    headers: dict[str, str], body: bytes = PUSH, secrets: list[str] | None = None
) -> schemes.Verified:
    return GITLAB.verify(Delivery(headers, body), secrets or [TOKEN], now=0, tolerance=300)


def test_the_configured_token_verifies_and_names_the_secret_that_matched() -> None:
    assert verify(gitlab_headers()).secret == TOKEN
    assert verify(gitlab_headers("new-token"), secrets=[TOKEN, "new-token"]).secret == "new-token"


@pytest.mark.parametrize(
    "token",
    [TOKEN + "x", TOKEN[:-1], TOKEN.upper(), "", " " + TOKEN, "a\ud800"],
)
def test_any_other_token_fails(token: str) -> None:
    with pytest.raises(AuthenticationFailed):
        verify(gitlab_headers(token))
    with pytest.raises(AuthenticationFailed):
        verify({"x-gitlab-event": "Push Hook"})


def test_the_token_authenticates_the_sender_not_the_content() -> None:
    # GitLab's weaker guarantee, stated as a test: any body with the token is authentic.
    assert verify(gitlab_headers(), b'{"object_kind":"push","forged":true}').secret == TOKEN


def identify(
    headers: dict[str, str], body: bytes = PUSH, verified: schemes.Verified | None = None
) -> schemes.Identity:
    (identity,) = GITLAB.identify(
        Delivery(headers, body), json.loads(body), verified or schemes.Verified()
    )
    return identity


def test_the_key_is_idempotency_key_then_event_uuid_then_the_body_digest() -> None:
    uuids = {"idempotency-key": "idem-1", "x-gitlab-event-uuid": "event-1"}
    assert identify(gitlab_headers(**uuids)) == schemes.Identity("idem-1", "Push Hook", "event-1")
    assert identify(gitlab_headers(**{"x-gitlab-event-uuid": "event-1"})).event_id == "event-1"
    digest = "sha256:" + hashlib.sha256(b"Push Hook\x00" + PUSH).hexdigest()
    assert identify(gitlab_headers()).event_id == digest


def test_the_type_is_the_event_header_else_object_kind_else_event_name() -> None:
    assert identify({"x-gitlab-event": "Merge Request Hook"}).event_type == "Merge Request Hook"
    assert identify({}).event_type == "push"
    assert identify({}, b'{"event_name":"project_create"}').event_type == "project_create"
    with pytest.raises(InvalidPayload):
        identify({}, b'{"ref":"x"}')


@pytest.mark.parametrize(
    "headers",
    [
        {"idempotency-key": "k" * 256},
        {"x-gitlab-event-uuid": "a\x00b"},
        {"x-gitlab-event": "t" * 256},
    ],
)
def test_unusable_key_or_type_headers_are_400(headers: dict[str, str]) -> None:
    with pytest.raises(InvalidPayload):
        identify(gitlab_headers() | headers)


def test_we_sign_as_gitlab_sends() -> None:
    signed = GITLAB.sign(TOKEN, PUSH, timestamp=0, event_id="idem-9", event_type="Push Hook")
    assert signed.headers["X-Gitlab-Token"] == TOKEN
    assert signed.headers["Idempotency-Key"] == "idem-9"
    assert signed.headers["X-Gitlab-Event"] == "Push Hook"
    headers = {k.lower(): v for k, v in signed.headers.items()}
    assert identify(headers, verified=verify(headers)).event_id == "idem-9"


# --- the signing token (Standard Webhooks) ----------------------------------------------------


def sw_headers(**extra: str) -> dict[str, str]:
    return {
        "webhook-id": SW_ID,
        "webhook-timestamp": str(SW_TS),
        "webhook-signature": SW_SIGNATURE,
        **extra,
    }


def test_the_signing_token_verifies_the_standard_webhooks_known_answer() -> None:
    headers = sw_headers(**{"x-gitlab-event": "Push Hook", "idempotency-key": SW_ID})
    verified = SIGNED.verify(Delivery(headers, SW_BODY), [SW_SECRET], now=SW_TS, tolerance=300)
    assert verified.signed_id == SW_ID
    (identity,) = SIGNED.identify(Delivery(headers, SW_BODY), json.loads(SW_BODY), verified)
    assert (identity.event_id, identity.event_type) == (SW_ID, "Push Hook")  # the signed id


def test_the_standard_webhooks_scheme_verifies_gitlab_but_cannot_type_its_events() -> None:
    # Why GitLab's signing token is an option of `gitlab`, not the `standard-webhooks` scheme:
    # the signature is the same, but GitLab bodies have no `type` (they say object_kind).
    body = PUSH
    headers = {
        k.lower(): v
        for k, v in SIGNED.sign(SW_SECRET, body, timestamp=SW_TS, event_id="i-1").headers.items()
    }
    plain = schemes.StandardWebhooks()
    verified = plain.verify(Delivery(headers, body), [SW_SECRET], now=SW_TS, tolerance=300)
    with pytest.raises(InvalidPayload):
        plain.identify(Delivery(headers, body), json.loads(body), verified)
    verified = SIGNED.verify(Delivery(headers, body), [SW_SECRET], now=SW_TS, tolerance=300)
    (identity,) = SIGNED.identify(Delivery(headers, body), json.loads(body), verified)
    assert (identity.event_id, identity.event_type) == ("i-1", "push")


def test_our_signing_token_deliveries_verify_with_the_standardwebhooks_library() -> None:
    now = int(time.time())  # the library checks against the real clock
    signed = SIGNED.sign(SW_SECRET, PUSH, timestamp=now, event_id="i-2", event_type="Push Hook")
    assert signed.headers["Idempotency-Key"] == signed.headers["webhook-id"] == "i-2"
    assert "X-Gitlab-Token" not in signed.headers
    assert standardwebhooks.Webhook(SW_SECRET).verify(PUSH, signed.headers) == json.loads(PUSH)


def test_with_the_signing_token_a_token_alone_is_refused() -> None:
    # Not a downgrade: a request that only carries X-Gitlab-Token is a 401 in this mode.
    with pytest.raises(AuthenticationFailed):
        SIGNED.verify(
            Delivery(gitlab_headers(SW_SECRET), PUSH), [SW_SECRET], now=SW_TS, tolerance=300
        )
    altered = Delivery(sw_headers(), SW_BODY + b" ")
    with pytest.raises(SignatureMismatch):
        SIGNED.verify(altered, [SW_SECRET], now=SW_TS, tolerance=300)
    with pytest.raises(AuthenticationFailed) as info:
        SIGNED.verify(Delivery(sw_headers(), SW_BODY), [SW_SECRET], now=SW_TS + 301, tolerance=300)
    assert info.value.reason == "stale"
    assert SIGNED.uses_timestamp
    assert not GITLAB.uses_timestamp


@pytest.mark.parametrize(
    "config",
    [
        {"scheme": "gitlab", "secrets": [{"value": "t"}], "options": {"auth": "hmac"}},
        {"scheme": "gitlab", "secrets": [{"value": "t"}], "options": {"other": 1}},
        {
            "scheme": "gitlab",
            "secrets": [{"value": "not base64!"}],
            "options": {"auth": "signing-token"},
        },
    ],
)
def test_bad_configurations_are_refused_at_load(config: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        parse_config({"providers": {"gitlab": config}})
