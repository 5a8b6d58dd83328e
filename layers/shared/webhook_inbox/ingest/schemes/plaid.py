"""Plaid webhooks: a JWT in ``Plaid-Verification``, ES256, signed with the key its ``kid`` names;
its ``request_body_sha256`` claim is the SHA-256 (hex) of the exact body bytes, its ``iat`` at
most five minutes old (Plaid's documented check; the tolerance, 300 s, applies both ways).

Plaid hands its verification keys out only through ``/webhook_verification_key/get``, a POST that
needs the account's ``client_id`` and ``secret``: ingest holds no Plaid API credentials and makes
no such call, so **keys are pinned**: each provider secret is one JWK as that call returns it
(``webhook-inbox providers add NAME --scheme plaid --public-key-file key.json``). A token naming a
``kid`` nobody pinned answers 503 (``not_pinned``) and pages, so an operator can fetch and pin the
new key while Plaid retries; a pinned key whose ``expired_at`` has passed verifies nothing.

Plaid's bodies carry no event id: the key is a digest of the type (``webhook_type.webhook_code``)
and the body, which the token signs through ``request_body_sha256``. A retry repeats the body
(a new token, the same key); two events with byte-identical bodies are one, which Plaid's bodies
(an item, an account, a new-transactions count...) make unlikely but not impossible.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, SignatureMismatch
from webhook_inbox.ingest.schemes import base, jose, key_sets
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified

MAX_TOKEN_CHARS = 4096
_ALGORITHMS = frozenset({jose.ES256})
_HEX64 = re.compile(r"[0-9a-f]{64}")


class Plaid(Scheme):
    name = "plaid"
    default_tolerance_s = 300

    def check_secret(self, secret: str) -> None:
        key = jose.parse_jwk_text(secret, "plaid: a pinned key")
        if key.algorithm != jose.ES256:
            raise ConfigurationError("plaid: a pinned key is a P-256 JWK (ES256)")

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        token = jose.parse_compact(
            base.required_header(delivery.headers, "plaid-verification"),
            "Plaid-Verification",
            max_chars=MAX_TOKEN_CHARS,
            algorithms=_ALGORITHMS,
        )
        pinned = key_sets.pins(secrets, "plaid: a pinned key")
        key = key_sets.key_for(token.kid, pinned, mode=key_sets.PINNED, url=None, now=now)
        if not jose.verify(token, key):
            raise SignatureMismatch("Plaid-Verification's signature did not verify")
        claims = token.claims()
        claimed = claims.get("request_body_sha256")
        if not isinstance(claimed, str) or not _HEX64.fullmatch(claimed):
            raise AuthenticationFailed("request_body_sha256 is missing or not 64 hex digits")
        if not hmac.compare_digest(claimed, hashlib.sha256(delivery.body).hexdigest()):
            raise AuthenticationFailed("request_body_sha256 is not the body's")
        issued = jose.numeric_date(claims, "iat")
        base.check_fresh(issued, now, tolerance)
        return Verified(timestamp=issued)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        kind = base.bounded_text(payload.get("webhook_type"), "webhook_type", 100)
        code = base.bounded_text(payload.get("webhook_code"), "webhook_code", 100)
        event_type = f"{kind}.{code}"
        return [Identity(base.body_digest_id(event_type, delivery.body), event_type)]

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
        """``body`` with the token a development pin (a private P-256 JWK) signs as Plaid does."""
        key = jose.parse_jwk_text(secret, "plaid: the signing key")
        claims = {"iat": timestamp, "request_body_sha256": hashlib.sha256(body).hexdigest()}
        headers = {"Plaid-Verification": jose.sign(key, claims), "Content-Type": "application/json"}
        return Signed(headers, body, url)
