"""Signature schemes: how each provider signs a delivery and where its event id and type live.

Every scheme verifies the *raw* body bytes, decodes signature headers strictly, compares with
``hmac.compare_digest``, accepts any of several active secrets (rotation) and, when the scheme
carries a timestamp, enforces a tolerance in both directions. Every scheme can also *sign*, so
the CLI and the tests produce deliveries exactly as the provider would.

Verification failures raise :class:`AuthenticationFailed` whose detail is for logs only; its
``reason`` is ``signature`` (missing, malformed or wrong) or ``stale`` (authentic but outside the
tolerance window).

Where an id header is *not* covered by the signature (GitHub, Shopify, a generic sender that
signs only the body), the deduplication key is a digest of the event type and the signed body,
``sha256:<hex of type NUL body>``, and the header id is kept as ``delivery_id`` for information:
a replayer could change an unsigned id header at will, but not the signed bytes. The type is in
the key because providers send byte-identical bodies under different types (Shopify's
``orders/create`` and ``orders/paid`` for an order paid at checkout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.schemes.base import (
    DEFAULT_TOLERANCE_S,
    MAX_ID_CHARS,
    MAX_TYPE_CHARS,
    Delivery,
    Headers,
    Identity,
    Reply,
    Scheme,
    Signed,
    Verified,
    body_digest_id,
    bounded_text,
    content_digest_id,
    json_path,
)
from webhook_inbox.schemes.hmac_family import GenericHmac, GitHub, Shopify, Slack
from webhook_inbox.schemes.standard_webhooks import StandardWebhooks
from webhook_inbox.schemes.stripe import Stripe

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "MAX_ID_CHARS",
    "MAX_TYPE_CHARS",
    "SCHEMES",
    "Delivery",
    "GenericHmac",
    "GitHub",
    "Headers",
    "Identity",
    "Reply",
    "Scheme",
    "Shopify",
    "Signed",
    "Slack",
    "StandardWebhooks",
    "Stripe",
    "Verified",
    "body_digest_id",
    "bounded_text",
    "build",
    "content_digest_id",
    "json_path",
]

SCHEMES: dict[str, type[Scheme]] = {
    cls.name: cls for cls in (StandardWebhooks, Stripe, GitHub, Shopify, Slack, GenericHmac)
}


def build(name: str, options: Mapping[str, Any] | None = None) -> Scheme:
    try:
        cls = SCHEMES[name]
    except KeyError:
        raise ConfigurationError(f"unknown scheme {name!r}; one of {sorted(SCHEMES)}") from None
    return cls(options)
