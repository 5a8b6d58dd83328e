"""Standard Webhooks and Svix."""

from __future__ import annotations

import base64
import binascii
import secrets as _random
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_inbox.errors import (
    ConfigurationError,
    SignatureMismatch,
)
from webhook_inbox.schemes.base import (
    MAX_ID_CHARS,
    MAX_SIGNATURES_PER_HEADER,
    MAX_TYPE_CHARS,
    Delivery,
    Headers,
    Identity,
    Scheme,
    Signed,
    Verified,
    _any_match,
    _b64_digest,
    _check_fresh,
    _fail,
    _header,
    _mac,
    _timestamp,
    bounded_text,
)


class StandardWebhooks(Scheme):
    """Standard Webhooks and Svix: ``{id}.{timestamp}.{body}``, base64 key after ``whsec_``."""

    name = "standard-webhooks"
    option_names = frozenset({"header_prefix"})
    _PREFIXES = ("webhook", "svix")

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        prefix = self.options.get("header_prefix", "webhook")
        if prefix not in self._PREFIXES:
            raise ConfigurationError("standard-webhooks: header_prefix is 'webhook' or 'svix'")
        self.sign_prefix: str = prefix

    @staticmethod
    def key(secret: str) -> bytes:
        raw = secret.removeprefix("whsec_")
        try:
            # Secrets are configuration, not attacker input: tolerate missing padding.
            key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
        except binascii.Error:
            raise ConfigurationError("standard-webhooks: secret is not base64") from None
        if not key:
            raise ConfigurationError("standard-webhooks: empty secret")
        return key

    def check_secret(self, secret: str) -> None:
        self.key(secret)

    def _names(self, headers: Headers) -> str:
        # One family per request: never combine a webhook-id with a svix-signature.
        for prefix in self._PREFIXES:
            if f"{prefix}-id" in headers or f"{prefix}-signature" in headers:
                return prefix
        return "webhook"

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        headers, body = delivery.headers, delivery.body
        prefix = self._names(headers)
        msg_id = _header(headers, f"{prefix}-id")
        timestamp_text = _header(headers, f"{prefix}-timestamp")
        timestamp = _timestamp(timestamp_text)
        entries = _header(headers, f"{prefix}-signature").split(" ")
        if len(entries) > MAX_SIGNATURES_PER_HEADER:
            raise _fail("too many signatures")
        presented = []
        for entry in entries:
            version, sep, value = entry.partition(",")
            if not sep:
                raise _fail("signature entry is not version,value")
            if version == "v1":  # other versions (v1a: asymmetric) are not ours to check
                presented.append(_b64_digest(value))
        if not presented:
            raise _fail("no v1 signature")
        signed_prefix = f"{msg_id}.{timestamp_text}.".encode()
        expected = [_mac(self.key(s), signed_prefix, body) for s in secrets]
        if not _any_match(expected, presented):
            raise SignatureMismatch("no v1 signature matched")
        _check_fresh(timestamp, now, tolerance)
        return Verified(signed_id=msg_id, timestamp=timestamp)

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
        msg_id = event_id or f"msg_{_random.token_urlsafe(18)}"
        mac = _mac(self.key(secret), f"{msg_id}.{timestamp}.".encode(), body)
        p = self.sign_prefix
        headers = {
            f"{p}-id": msg_id,
            f"{p}-timestamp": str(timestamp),
            f"{p}-signature": "v1," + base64.b64encode(mac).decode(),
        }
        return Signed(headers, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        return [
            Identity(
                event_id=bounded_text(verified.signed_id, "webhook-id", MAX_ID_CHARS),
                event_type=bounded_text(payload.get("type"), "event type", MAX_TYPE_CHARS),
            )
        ]
