"""Discord: Ed25519 over ``{X-Signature-Timestamp}{body}``, for the Interactions endpoint and
for Webhook Events (two URLs in the developer portal, so two providers: ``options.endpoint``).

Interactions must be answered within 3 seconds, with the answer itself: a PING with
``{"type":1}``; anything else is stored under its signed ``id`` and acknowledged with a deferred
response, so a handler can follow up through the interaction token (valid 15 minutes).
Webhook Events want a 204 with an empty body, PING (type 0) included; they carry no id, so the
key is a digest of the event.

SendGrid signs the same way with another key type (:class:`KeySignedTimestamp`, shared).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from webhook_inbox.errors import ConfigurationError, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest.schemes import base, public_keys
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.public_keys import PrivateKey, PublicKey

_HEX_SIGNATURE = re.compile(r"[0-9a-fA-F]{128}")
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
INTERACTIONS = "interactions"
WEBHOOK_EVENTS = "webhook-events"

# Interaction types (Discord's InteractionType) and the replies they need.
_PING, _COMPONENT, _AUTOCOMPLETE = 1, 3, 4
_INTERACTION_TYPES = {
    2: "APPLICATION_COMMAND",
    _COMPONENT: "MESSAGE_COMPONENT",
    _AUTOCOMPLETE: "APPLICATION_COMMAND_AUTOCOMPLETE",
    5: "MODAL_SUBMIT",
}
_PONG = Reply.json({"type": 1})
# Autocomplete wants its choices now, which a stored event cannot give: an empty list, unstored.
_NO_CHOICES = Reply.json({"type": 8, "data": {"choices": []}})
# DEFERRED_UPDATE_MESSAGE for components (no "thinking" message), else
# DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE; the handler then edits or follows up with the token.
_DEFERRED_UPDATE = Reply.json({"type": 6})
_DEFERRED_MESSAGE = Reply.json({"type": 5})
_NO_CONTENT = Reply("", 204)
_EVENT_PING, _EVENT = 0, 1


_PRIVATE = "discord: the private key"


def _public(secret: str) -> PublicKey:
    if not _HEX_KEY.fullmatch(secret):
        raise ConfigurationError(
            "discord: a key is the application public key (64 hex digits) "
            "or, to sign in development, a PEM (PKCS#8) Ed25519 private key"
        )
    return public_keys.ed25519_public(bytes.fromhex(secret), "discord: the public key")


@functools.lru_cache(maxsize=64)
def _keys(secret: str) -> tuple[PublicKey, PrivateKey | None]:
    """The application public key (64 hex digits, as the developer portal shows it), or a PEM
    Ed25519 private key for signing in development (Discord keeps its own)."""
    if public_keys.is_pem(secret):
        private = public_keys.private_from_pem(secret.strip(), public_keys.ED25519, _PRIVATE)
        return private.public, private
    return _public(secret), None


def _integer(payload: Mapping[str, Any], field: str) -> int:
    value = payload.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidPayload(f"{field} is missing or not an integer")
    return value


class KeySignedTimestamp(Scheme):
    """A private key's signature over a timestamp header's text followed by the body, verified
    with the configured public keys (any one verifying) and the timestamp within the tolerance.
    Discord's shape, SendGrid's too; a subclass decodes its signature header, loads its keys and
    writes the headers it signs with."""

    timestamp_header: ClassVar[str]
    key_algorithm: ClassVar[str]  # public_keys.ED25519 or public_keys.P256
    private_key_label: ClassVar[str]  # names a private key in configuration errors
    verify_only: ClassVar[str]  # why sign() refuses a secret that holds only a public key

    def presented_signature(self, delivery: Delivery) -> bytes:
        """The signature header's bytes, or a 401 when it is missing or malformed."""
        raise NotImplementedError

    def key_pair(self, secret: str) -> tuple[PublicKey, PrivateKey | None]:
        """The public key a secret holds, and its private key when it is one."""
        raise NotImplementedError

    def signed_headers(self, signature: bytes, timestamp: int) -> dict[str, str]:
        raise NotImplementedError

    def check_secret(self, secret: str) -> None:
        if public_keys.is_pem(secret):  # its shape only: loading it would import cryptography
            public_keys.check_pem(secret, self.key_algorithm, self.private_key_label)
        else:
            self.key_pair(secret)  # a public key loads without it, or is refused

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        signature = self.presented_signature(delivery)
        timestamp_text = base.required_header(delivery.headers, self.timestamp_header)
        timestamp = base.parse_timestamp(timestamp_text)
        verifying_keys = [self.key_pair(secret)[0] for secret in secrets]
        signed = timestamp_text.encode() + delivery.body
        if public_keys.verified_index(verifying_keys, signed, [signature]) is None:
            raise SignatureMismatch("signature did not verify")
        base.check_fresh(timestamp, now, tolerance)
        return Verified(timestamp=timestamp)

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
        _, private = self.key_pair(secret)
        if private is None:
            raise ConfigurationError(self.verify_only)
        signature = private.sign(str(timestamp).encode() + body)
        return Signed(self.signed_headers(signature, timestamp), body, url)


class Discord(KeySignedTimestamp):
    """Discord interactions and webhook events: ``X-Signature-Ed25519`` (hex) over the
    ``X-Signature-Timestamp`` header's text followed by the body."""

    name = "discord"
    timestamp_header = "x-signature-timestamp"
    key_algorithm = public_keys.ED25519
    private_key_label = _PRIVATE
    verify_only = (
        "discord: the application public key only verifies; sign with a PEM Ed25519 private key"
    )
    option_names = frozenset({"endpoint"})
    # Discord documents no window. Webhook Events are retried for up to 10 minutes and may keep
    # their first signature (unverified): a replay inside the window is only a duplicate.
    default_tolerance_s = 600

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        endpoint = self.options.get("endpoint")
        # Required: an interaction PING and a webhook Event are both type 1, so guessing the
        # endpoint from the body would answer events as PINGs and never store them.
        if endpoint not in {INTERACTIONS, WEBHOOK_EVENTS}:
            raise ConfigurationError(
                f"discord: options.endpoint is {INTERACTIONS!r} or {WEBHOOK_EVENTS!r}"
            )
        self.endpoint: str = endpoint

    @staticmethod
    def public_key(secret: str) -> str:
        """The public key to configure for ``secret`` (a private key, or a public key as is)."""
        return _keys(secret)[0].data.hex()

    def presented_signature(self, delivery: Delivery) -> bytes:
        signature_hex = base.required_header(delivery.headers, "x-signature-ed25519")
        if not _HEX_SIGNATURE.fullmatch(signature_hex):
            raise base.fail("signature is not 128 hex digits")
        return bytes.fromhex(signature_hex)

    def key_pair(self, secret: str) -> tuple[PublicKey, PrivateKey | None]:
        return _keys(secret)

    def signed_headers(self, signature: bytes, timestamp: int) -> dict[str, str]:
        return {"X-Signature-Ed25519": signature.hex(), "X-Signature-Timestamp": str(timestamp)}

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        kind = _integer(payload, "type")
        if self.endpoint == INTERACTIONS:
            if kind == _PING:
                return _PONG
            if kind == _AUTOCOMPLETE:
                return _NO_CHOICES
            name = _INTERACTION_TYPES.get(kind) or f"INTERACTION_TYPE_{kind}"  # a newer type
            return [
                Identity(
                    event_id=base.bounded_text(
                        payload.get("id"), "interaction id", base.MAX_ID_CHARS
                    ),
                    event_type=base.bounded_text(name, "interaction type", base.MAX_TYPE_CHARS),
                )
            ]
        if kind == _EVENT_PING:
            return _NO_CONTENT
        event = payload.get("event")
        if kind != _EVENT or not isinstance(event, Mapping):
            raise InvalidPayload("a webhook event is type 1 with an event object")
        event_type = base.bounded_text(event.get("type"), "event.type", base.MAX_TYPE_CHARS)
        # No id anywhere (body or headers): the key is the signed event in canonical JSON.
        return [
            Identity(
                event_id=base.content_digest_id(event_type, payload, without=()),
                event_type=event_type,
            )
        ]

    def acknowledge(self, payload: Any, *, new: bool) -> Reply | None:
        if self.endpoint == WEBHOOK_EVENTS:
            return _NO_CONTENT
        if payload.get("type") == _COMPONENT:
            return _DEFERRED_UPDATE
        return _DEFERRED_MESSAGE
