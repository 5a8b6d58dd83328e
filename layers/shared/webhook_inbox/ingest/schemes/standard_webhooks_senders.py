"""Named Standard Webhooks / Svix senders: the ``standard-webhooks`` verification, the sender's
own header family when signing, and where each puts its event type.

Verification accepts either header family (``webhook-*`` or ``svix-*``) as the base scheme does;
the key is the signed ``webhook-id`` / ``svix-id`` for all of them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, ClassVar

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Verified
from webhook_inbox.ingest.schemes.standard_webhooks import StandardWebhooks


class _Sender(StandardWebhooks):
    """A Standard Webhooks sender by name: no options; signs with ``header_family``."""

    header_family: ClassVar[str] = "webhook"
    option_names = frozenset()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.sign_prefix = self.header_family


class Clerk(_Sender):
    """Clerk (through Svix): ``svix-*`` headers, ``whsec_`` secret; body ``type``
    (``user.created``)."""

    name = "clerk"
    header_family = "svix"


class Resend(_Sender):
    """Resend (through Svix): ``svix-*`` headers, ``whsec_`` secret; body ``type``
    (``email.delivered``)."""

    name = "resend"
    header_family = "svix"


class OpenAI(_Sender):
    """OpenAI: ``webhook-*`` headers, ``whsec_`` secret; body ``type``
    (``response.completed``)."""

    name = "openai"


class Replicate(_Sender):
    """Replicate: ``webhook-*`` headers, ``whsec_`` secret (from its webhooks/default/secret
    endpoint). The body is the prediction itself, which has no type: the type is
    ``prediction.<status>`` (``prediction.succeeded``)."""

    name = "replicate"

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        status = base.bounded_text(payload.get("status"), "prediction status", 200)
        return [
            Identity(
                event_id=base.bounded_text(verified.signed_id, "webhook-id", base.MAX_ID_CHARS),
                event_type=f"prediction.{status}",
            )
        ]


class Polar(_Sender):
    """Polar: ``webhook-*`` headers, but the HMAC key is the secret's own UTF-8 bytes, not a
    base64 key after ``whsec_`` (what Polar's SDK verifies with). As that SDK does, a ``whsec_``
    secret is also tried base64-decoded, so a secret in either form verifies; signing uses the
    UTF-8 form."""

    name = "polar"

    @staticmethod
    def key(secret: str) -> bytes:
        if not secret:
            raise ConfigurationError("polar: empty secret")
        return secret.encode()

    def verifying_keys(self, secret: str) -> list[bytes]:
        keys = [self.key(secret)]
        rest = secret.removeprefix("whsec_")
        try:
            decoded = base64.b64decode(rest + "=" * (-len(rest) % 4), validate=True)
        except (binascii.Error, ValueError):
            return keys
        return [*keys, decoded] if decoded and decoded != keys[0] else keys

    def check_secret(self, secret: str) -> None:
        self.key(secret)
