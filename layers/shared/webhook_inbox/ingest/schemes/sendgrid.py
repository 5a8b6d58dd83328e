"""SendGrid's signed Event Webhook: ECDSA P-256 / SHA-256 over ``{timestamp}{body}``; the body
is a JSON array of events, each stored as its own row under its signed ``sg_event_id``."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Mapping
from typing import Any

from webhook_inbox.errors import ConfigurationError, InvalidPayload
from webhook_inbox.ingest.schemes import base, public_keys
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Verified
from webhook_inbox.ingest.schemes.discord import KeySignedTimestamp
from webhook_inbox.ingest.schemes.public_keys import PrivateKey, PublicKey

SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"
_B64_DER = re.compile(r"[A-Za-z0-9+/]{8,96}={0,2}")


_PRIVATE = "sendgrid: the private key"


@functools.lru_cache(maxsize=64)
def _keys(secret: str) -> tuple[PublicKey, PrivateKey | None]:
    """The Verification Key from SendGrid's Mail Settings (base64 DER SubjectPublicKeyInfo), or
    a PEM P-256 private key for signing in development (SendGrid keeps its own)."""
    if public_keys.is_pem(secret):
        private = public_keys.private_from_pem(secret.strip(), public_keys.P256, _PRIVATE)
        return private.public, private
    return _public(secret), None


def _public(secret: str) -> PublicKey:
    try:
        der = base64.b64decode(secret, validate=True)
    except binascii.Error:
        der = b""
    if not der:
        raise ConfigurationError(
            "sendgrid: a key is the Verification Key (base64 DER, 'MFkw…') "
            "or, to sign in development, a PEM (PKCS#8) P-256 private key"
        )
    return public_keys.p256_public(der, "sendgrid: the Verification Key")


class SendGrid(KeySignedTimestamp):
    """SendGrid Event Webhook: ``X-Twilio-Email-Event-Webhook-Signature`` (base64 DER ECDSA)
    over the ``X-Twilio-Email-Event-Webhook-Timestamp`` header's text followed by the body."""

    name = "sendgrid"
    timestamp_header = TIMESTAMP_HEADER.lower()
    key_algorithm = public_keys.P256
    private_key_label = _PRIVATE
    verify_only = "sendgrid: the Verification Key only verifies; sign with a PEM P-256 private key"
    body_format = "json-array"
    # SendGrid documents no window and retries for up to 24 hours; whether a retry is signed
    # afresh is not documented. The widest tolerance keeps every retry; a replay inside it only
    # meets the rows its signed event ids already hold.
    default_tolerance_s = 86_400

    @staticmethod
    def public_key(secret: str) -> str:
        """The Verification Key to configure for ``secret`` (a private key, or one as is)."""
        return base64.b64encode(_keys(secret)[0].data).decode()

    def presented_signature(self, delivery: Delivery) -> bytes:
        signature_b64 = base.required_header(delivery.headers, SIGNATURE_HEADER.lower())
        if not _B64_DER.fullmatch(signature_b64):
            raise base.fail("signature is not base64")
        try:
            signature = base64.b64decode(signature_b64, validate=True)
        except binascii.Error:
            raise base.fail("signature is not base64") from None
        if len(signature) > public_keys.MAX_P256_SIGNATURE_BYTES:
            raise base.fail("signature is longer than a P-256 signature")
        return signature

    def key_pair(self, secret: str) -> tuple[PublicKey, PrivateKey | None]:
        return _keys(secret)

    def signed_headers(self, signature: bytes, timestamp: int) -> dict[str, str]:
        return {
            SIGNATURE_HEADER: base64.b64encode(signature).decode(),
            TIMESTAMP_HEADER: str(timestamp),
        }

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        """One identity per event of the batch: its ``sg_event_id`` (signed, inside the body),
        or, for an event type that carries none, a digest of the event's content."""
        if not isinstance(payload, list) or not payload:  # parse() checked; guard anyway
            raise InvalidPayload("a SendGrid delivery is a non-empty JSON array of events")
        found = []
        for event in payload:
            if not isinstance(event, Mapping):
                raise InvalidPayload("every SendGrid event is a JSON object")
            event_type = base.bounded_text(event.get("event"), "event", base.MAX_TYPE_CHARS)
            sg_event_id = event.get("sg_event_id")
            if sg_event_id is None:
                event_id = base.content_digest_id(event_type, event, without=())
            else:
                event_id = base.bounded_text(sg_event_id, "sg_event_id", base.MAX_ID_CHARS)
            found.append(Identity(event_id=event_id, event_type=event_type, payload=event))
        return found
