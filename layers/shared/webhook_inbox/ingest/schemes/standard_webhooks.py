"""Standard Webhooks and Svix: ``v1`` (HMAC-SHA256) and ``v1a`` (Ed25519) signatures."""

from __future__ import annotations

import base64
import binascii
import functools
import re
import secrets as _random
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_inbox.errors import (
    ConfigurationError,
    SignatureMismatch,
)
from webhook_inbox.ingest.schemes import base, public_keys
from webhook_inbox.ingest.schemes.base import Delivery, Headers, Identity, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.public_keys import PrivateKey, PublicKey

_B64_ED25519_SIGNATURE = re.compile(r"[A-Za-z0-9+/]{86}==")
# The spec's key prefixes: whsec_ is an HMAC secret (v1); whpk_ and whsk_ are the public and
# the secret half of an Ed25519 key pair (v1a).
_PUBLIC_KEY = "whpk_"
_SIGNING_KEY = "whsk_"


def _is_key_pair(secret: str) -> bool:
    return secret.startswith((_PUBLIC_KEY, _SIGNING_KEY))


def _config_b64(text: str, what: str) -> bytes:
    try:
        # Secrets are configuration, not attacker input: tolerate missing padding.
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise ConfigurationError(f"standard-webhooks: {what} is not base64") from None


@functools.lru_cache(maxsize=64)
def _ed25519(secret: str) -> tuple[PublicKey, PrivateKey | None]:
    """The v1a verification key of a ``whpk_`` or ``whsk_`` secret, and a ``whsk_``'s signing key.

    The spec does not say whether ``whsk_`` holds the 32-byte seed or the 64-byte seed and
    public key (its reference branches differ), so both are accepted; the public half of the
    64-byte form must be the seed's own.
    """
    if secret.startswith(_PUBLIC_KEY):
        return _whpk(secret), None
    raw = _whsk(secret)
    private = public_keys.ed25519_private_from_seed(raw[:32], _WHSK)
    if len(raw) == 64 and raw[32:] != private.public.data:
        raise ConfigurationError(f"{_WHSK}: its public half is not the seed's public key")
    return private.public, private


_WHSK = "standard-webhooks: the whsk_ key"


def _whpk(secret: str) -> PublicKey:
    raw = _config_b64(secret.removeprefix(_PUBLIC_KEY), "the whpk_ key")
    return public_keys.ed25519_public(raw, "standard-webhooks: the whpk_ key")


def _whsk(secret: str) -> bytes:
    """A ``whsk_`` key's bytes, shape-checked without cryptography (its public half, in the
    64-byte form, is checked against the seed when the key is first used)."""
    raw = _config_b64(secret.removeprefix(_SIGNING_KEY), "the whsk_ key")
    if len(raw) not in (32, 64):
        raise ConfigurationError(f"{_WHSK} is neither a 32-byte seed nor seed and public key")
    return raw


def _signing_key(secret: str) -> PrivateKey:
    _, private = _ed25519(secret)
    if private is None:
        raise ConfigurationError(
            "standard-webhooks: a whpk_ public key only verifies; sign with its whsk_ key"
        )
    return private


def _ed25519_signature(text: str) -> bytes:
    if not _B64_ED25519_SIGNATURE.fullmatch(text):
        raise base.fail("v1a signature is not a base64 Ed25519 signature")
    return base64.b64decode(text, validate=True)


class StandardWebhooks(Scheme):
    """Standard Webhooks and Svix: signed content ``{id}.{timestamp}.{body}``.

    ``v1`` entries are HMAC-SHA256 with the base64 key after ``whsec_``; ``v1a`` entries are
    Ed25519 signatures, verified with ``whpk_`` public keys (or the public half of a ``whsk_``
    secret key). One provider may hold both kinds (a sender moving from one to the other); a
    delivery verifies when any entry matches any key of its kind. Signing with a ``whsk_``
    secret key makes a ``v1a`` entry, with a ``whsec_`` secret a ``v1`` one.
    """

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
        key = _config_b64(secret.removeprefix("whsec_"), "secret")
        if not key:
            raise ConfigurationError("standard-webhooks: empty secret")
        return key

    def verifying_keys(self, secret: str) -> list[bytes]:
        """The HMAC keys one configured secret stands for (one, except for a sender whose
        secrets come in two forms: Polar)."""
        return [self.key(secret)]

    def check_secret(self, secret: str) -> None:
        if secret.startswith(_PUBLIC_KEY):
            _whpk(secret)
        elif secret.startswith(_SIGNING_KEY):
            _whsk(secret)
        else:
            self.key(secret)

    @staticmethod
    def public_key(secret: str) -> str:
        """The ``whpk_`` key to configure for a ``whsk_`` (or ``whpk_``) key."""
        if not _is_key_pair(secret):
            raise ConfigurationError("standard-webhooks: only whsk_ and whpk_ keys have one")
        return _PUBLIC_KEY + base64.b64encode(_ed25519(secret)[0].data).decode()

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
        msg_id = base.required_header(headers, f"{prefix}-id")
        timestamp_text = base.required_header(headers, f"{prefix}-timestamp")
        timestamp = base.parse_timestamp(timestamp_text)
        entries = base.required_header(headers, f"{prefix}-signature").split(" ")
        if len(entries) > base.MAX_SIGNATURES_PER_HEADER:
            raise base.fail("too many signatures")
        macs, ed25519_signatures = [], []
        for entry in entries:
            version, sep, value = entry.partition(",")
            if not sep:
                raise base.fail("signature entry is not version,value")
            if version == "v1":
                macs.append(base.b64_digest(value))
            elif version == "v1a":
                ed25519_signatures.append(_ed25519_signature(value))
            # other versions are ignored, as the spec asks
        if not macs and not ed25519_signatures:
            raise base.fail("no v1 or v1a signature")
        signed_prefix = f"{msg_id}.{timestamp_text}.".encode()
        hmac_secrets = [s for s in secrets if not _is_key_pair(s)]
        verifying_keys = [_ed25519(s)[0] for s in secrets if _is_key_pair(s)]
        matched = False
        if macs and hmac_secrets:
            expected = [
                base.compute_mac(key, signed_prefix, body)
                for s in hmac_secrets
                for key in self.verifying_keys(s)
            ]
            matched |= base.any_match(expected, macs)
        if ed25519_signatures and verifying_keys:
            signed = signed_prefix + body
            matched |= (
                public_keys.verified_index(verifying_keys, signed, ed25519_signatures) is not None
            )
        if not matched:
            raise SignatureMismatch("no v1 or v1a signature matched")
        base.check_fresh(timestamp, now, tolerance)
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
        signed_prefix = f"{msg_id}.{timestamp}.".encode()
        if _is_key_pair(secret):
            signature = _signing_key(secret).sign(signed_prefix + body)
            entry = "v1a," + base64.b64encode(signature).decode()
        else:
            entry = (
                "v1,"
                + base64.b64encode(base.compute_mac(self.key(secret), signed_prefix, body)).decode()
            )
        p = self.sign_prefix
        headers = {
            f"{p}-id": msg_id,
            f"{p}-timestamp": str(timestamp),
            f"{p}-signature": entry,
        }
        return Signed(headers, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        return [
            Identity(
                event_id=base.bounded_text(verified.signed_id, "webhook-id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(
                    payload.get("type"), "event type", base.MAX_TYPE_CHARS
                ),
            )
        ]
