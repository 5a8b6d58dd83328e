"""Google Cloud Pub/Sub push subscriptions with authentication: an OIDC ID token in
``Authorization: Bearer``, RS256, signed by Google with the keys it publishes at
``https://www.googleapis.com/oauth2/v3/certs`` (:mod:`.key_sets` downloads, caches or pins them).
Also the carrier of Google Play's real-time developer notifications.

Checked, as Google documents for push authentication: the signature under the key the token's
``kid`` names; ``iss`` is ``https://accounts.google.com`` (or without the scheme); ``aud`` is
``options.audience`` (the subscription's audience, by default the push endpoint's URL); ``email``
is ``options.service_account_email`` (the subscription's service account) with
``email_verified`` true; ``exp``/``iat``/``nbf`` with the tolerance as clock leeway (60 s).
google-auth's ``verify_token`` checks neither ``iss`` nor ``email``: both are checked here.

**The token authenticates the sender, not the body.** It covers no part of the request (like
Telegram's secret token): whoever captures one request can post other bodies with its token until
it expires (an hour at most), so TLS is what protects the content. The key is the envelope's
``message.messageId`` (Pub/Sub repeats it on every redelivery, with a ``deliveryAttempt`` that
changes), unsigned; ``options.subscriptions``, when set, must list the envelope's
``subscription``. The type is the message attribute ``options.type_attribute`` when set and
present, else the subscription's short name.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    SignatureMismatch,
)
from webhook_inbox.ingest.schemes import base, jose, key_sets
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified

CERTS_URL = "https://www.googleapis.com/oauth2/v3/certs"
ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})
MAX_TOKEN_CHARS = 4096
_ALGORITHMS = frozenset({jose.RS256})
_SUBSCRIPTION = re.compile(r"projects/[a-z][a-z0-9\-]{4,28}[a-z0-9]/subscriptions/[^/\s]{3,255}")
_EMAIL = re.compile(r"[^@\s]{1,64}@[A-Za-z0-9.\-]{1,255}")
_BEARER = re.compile(r"Bearer ([A-Za-z0-9_\-.]+)", re.IGNORECASE)


class GooglePubSub(Scheme):
    name = "google-pubsub"
    uses_timestamp = False  # the token's own lifetime bounds it; the tolerance is clock leeway
    default_tolerance_s = 60
    option_names = frozenset(
        {"audience", "service_account_email", "subscriptions", "type_attribute", "keys"}
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        audience = self.options.get("audience")
        if not isinstance(audience, str) or not audience or len(audience) > 2000:
            raise ConfigurationError(
                "google-pubsub: options.audience is the push subscription's audience (by "
                "default the push endpoint's URL)"
            )
        email = self.options.get("service_account_email")
        if not isinstance(email, str) or not _EMAIL.fullmatch(email):
            raise ConfigurationError(
                "google-pubsub: options.service_account_email is the service account the "
                "subscription pushes as"
            )
        subscriptions = self.options.get("subscriptions")
        if subscriptions is not None and (
            not isinstance(subscriptions, list)
            or not subscriptions
            or not all(isinstance(s, str) and _SUBSCRIPTION.fullmatch(s) for s in subscriptions)
        ):
            raise ConfigurationError(
                "google-pubsub: options.subscriptions lists projects/P/subscriptions/S names"
            )
        type_attribute = self.options.get("type_attribute")
        if type_attribute is not None and not (isinstance(type_attribute, str) and type_attribute):
            raise ConfigurationError("google-pubsub: options.type_attribute is an attribute name")
        mode = self.options.get("keys", key_sets.FETCH)
        if mode not in (key_sets.FETCH, key_sets.PINNED):
            raise ConfigurationError("google-pubsub: options.keys is fetch or pinned")
        self.audience: str = audience
        self.email: str = email
        self.subscriptions = frozenset(subscriptions) if subscriptions else None
        self.type_attribute: str | None = type_attribute
        self.mode: str = mode

    @property
    def requires_secrets(self) -> bool:
        return self.mode == key_sets.PINNED

    def check_secret(self, secret: str) -> None:
        key = jose.parse_jwk_text(secret, "google-pubsub: a pinned key")
        if key.algorithm != jose.RS256:
            raise ConfigurationError("google-pubsub: a pinned key is an RSA JWK (RS256)")

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        authorization = base.required_header(delivery.headers, "authorization")
        bearer = _BEARER.fullmatch(authorization)
        if bearer is None:
            raise base.fail("Authorization is not a Bearer token")
        token = jose.parse_compact(
            bearer[1], "the OIDC token", max_chars=MAX_TOKEN_CHARS, algorithms=_ALGORITHMS
        )
        pinned = key_sets.pins(secrets, "google-pubsub: a pinned key")
        key = key_sets.key_for(token.kid, pinned, mode=self.mode, url=CERTS_URL, now=now)
        if not jose.verify(token, key):
            raise SignatureMismatch("the OIDC token's signature did not verify")
        claims = token.claims()
        if claims.get("iss") not in ISSUERS:
            raise AuthenticationFailed("the OIDC token's iss is not Google's")
        if claims.get("aud") != self.audience:
            raise AuthenticationFailed("the OIDC token's aud is not options.audience")
        if claims.get("email") != self.email or claims.get("email_verified") is not True:
            raise AuthenticationFailed("the OIDC token is not the service account's (email)")
        issued = jose.check_lifetime(claims, now=now, leeway=tolerance)
        return Verified(timestamp=issued)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        message = payload.get("message")
        if not isinstance(message, Mapping):
            raise InvalidPayload("a push envelope carries a message object")
        subscription = payload.get("subscription")
        if not isinstance(subscription, str) or not _SUBSCRIPTION.fullmatch(subscription):
            raise InvalidPayload("subscription is missing or not projects/P/subscriptions/S")
        if self.subscriptions is not None and subscription not in self.subscriptions:
            raise InvalidPayload("subscription is not one of options.subscriptions")
        # Pub/Sub writes both spellings; messageId is the documented one.
        message_id = message.get("messageId", message.get("message_id"))
        event_type = subscription.rsplit("/", 1)[-1]
        attributes = message.get("attributes")
        if self.type_attribute and isinstance(attributes, Mapping):
            found = attributes.get(self.type_attribute)
            if isinstance(found, str) and found:
                event_type = found
        return [
            Identity(
                # Not signed: the OIDC token covers no part of the body (module docstring).
                event_id=base.bounded_text(message_id, "message.messageId", base.MAX_ID_CHARS),
                event_type=base.bounded_text(event_type, "event type", base.MAX_TYPE_CHARS),
            )
        ]

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        timestamp: int,
        event_id: str | None = None,
        event_type: str | None = None,
        url: str = "",
    ) -> Signed:
        """``body`` (a push envelope, or any bytes to publish as its message's data) with a
        token a development pin (a private RSA JWK) signs as Google would."""
        key = jose.parse_jwk_text(secret, "google-pubsub: the signing key")
        document = base.object_to_sign(body)
        if document is None or "message" not in document:
            import uuid

            document = {
                "message": {
                    "data": base64.b64encode(body).decode(),
                    "messageId": event_id or str(uuid.uuid4().int)[:16],
                    "publishTime": _rfc3339(timestamp),
                },
                "subscription": "projects/dev-project/subscriptions/dev-push",
            }
        claims = {
            "aud": self.audience,
            "azp": "100000000000000000000",
            "email": self.email,
            "email_verified": True,
            "exp": timestamp + 3600,
            "iat": timestamp,
            "iss": "https://accounts.google.com",
            "sub": "100000000000000000000",
        }
        headers = {
            "Authorization": f"Bearer {jose.sign(key, claims)}",
            "Content-Type": "application/json",
        }
        return Signed(headers, json.dumps(document).encode(), url)


def _rfc3339(timestamp: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
