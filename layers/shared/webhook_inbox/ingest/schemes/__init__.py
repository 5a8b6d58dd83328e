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

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest.schemes.base import (
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

if TYPE_CHECKING:
    from webhook_inbox.ingest.schemes.adyen import Adyen
    from webhook_inbox.ingest.schemes.app_store import AppStore
    from webhook_inbox.ingest.schemes.body_hmac import (
        Bitbucket,
        CalCom,
        CheckoutCom,
        CoinbaseCommerce,
        Gitea,
        Intercom,
        Jira,
        LemonSqueezy,
        Razorpay,
        Sentry,
        Typeform,
        Vercel,
        WooCommerce,
    )
    from webhook_inbox.ingest.schemes.braintree import Braintree
    from webhook_inbox.ingest.schemes.challenges import Dropbox, Meta, WhatsApp, X
    from webhook_inbox.ingest.schemes.discord import Discord
    from webhook_inbox.ingest.schemes.docusign import DocuSign
    from webhook_inbox.ingest.schemes.event_lists import Asana, Xero
    from webhook_inbox.ingest.schemes.gitlab import GitLab
    from webhook_inbox.ingest.schemes.google_pubsub import GooglePubSub
    from webhook_inbox.ingest.schemes.hmac_family import GenericHmac, GitHub, Shopify, Slack
    from webhook_inbox.ingest.schemes.hubspot import HubSpot
    from webhook_inbox.ingest.schemes.linear import Linear
    from webhook_inbox.ingest.schemes.mailgun import Mailgun
    from webhook_inbox.ingest.schemes.paddle import Paddle
    from webhook_inbox.ingest.schemes.paypal import PayPal
    from webhook_inbox.ingest.schemes.plaid import Plaid
    from webhook_inbox.ingest.schemes.sendgrid import SendGrid
    from webhook_inbox.ingest.schemes.shared_tokens import MicrosoftGraph, Okta
    from webhook_inbox.ingest.schemes.sns import Sns
    from webhook_inbox.ingest.schemes.square import Square
    from webhook_inbox.ingest.schemes.standard_webhooks import StandardWebhooks
    from webhook_inbox.ingest.schemes.standard_webhooks_senders import (
        Clerk,
        OpenAI,
        Polar,
        Replicate,
        Resend,
    )
    from webhook_inbox.ingest.schemes.stripe import Calendly, Mux, Stripe
    from webhook_inbox.ingest.schemes.telegram import Telegram
    from webhook_inbox.ingest.schemes.twilio import Twilio
    from webhook_inbox.ingest.schemes.twitch import Twitch
    from webhook_inbox.ingest.schemes.zendesk import Zendesk
    from webhook_inbox.ingest.schemes.zoom import Zoom

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "MAX_ID_CHARS",
    "MAX_TYPE_CHARS",
    "SCHEMES",
    "Adyen",
    "AppStore",
    "Asana",
    "Bitbucket",
    "Braintree",
    "CalCom",
    "Calendly",
    "CheckoutCom",
    "Clerk",
    "CoinbaseCommerce",
    "Delivery",
    "Discord",
    "DocuSign",
    "Dropbox",
    "GenericHmac",
    "GitHub",
    "GitLab",
    "Gitea",
    "GooglePubSub",
    "Headers",
    "HubSpot",
    "Identity",
    "Intercom",
    "Jira",
    "LemonSqueezy",
    "Linear",
    "Mailgun",
    "Meta",
    "MicrosoftGraph",
    "Mux",
    "Okta",
    "OpenAI",
    "Paddle",
    "PayPal",
    "Plaid",
    "Polar",
    "Razorpay",
    "Replicate",
    "Reply",
    "Resend",
    "Scheme",
    "SendGrid",
    "Sentry",
    "Shopify",
    "Signed",
    "Slack",
    "Sns",
    "Square",
    "StandardWebhooks",
    "Stripe",
    "Telegram",
    "Twilio",
    "Twitch",
    "Typeform",
    "Vercel",
    "Verified",
    "WhatsApp",
    "WooCommerce",
    "X",
    "Xero",
    "Zendesk",
    "Zoom",
    "body_digest_id",
    "bounded_text",
    "build",
    "content_digest_id",
    "json_path",
]

# Scheme name -> (its module in this package, its class). A scheme's module is imported when a
# provider uses it, not with this package: ingest's cold start pays for the schemes its
# providers name (about 20 ms for the fifteen first, most of this package's import time).
_CLASS_OF_SCHEME: dict[str, tuple[str, str]] = {
    "standard-webhooks": ("standard_webhooks", "StandardWebhooks"),
    "stripe": ("stripe", "Stripe"),
    "github": ("hmac_family", "GitHub"),
    "shopify": ("hmac_family", "Shopify"),
    "slack": ("hmac_family", "Slack"),
    "hmac-sha256": ("hmac_family", "GenericHmac"),
    # Public-key senders (cryptography is imported on their first key use, public_keys.py).
    "discord": ("discord", "Discord"),
    "sendgrid": ("sendgrid", "SendGrid"),
    # URL-signed senders (they verify over the URL they called: see public_url) and Paddle.
    "twilio": ("twilio", "Twilio"),
    "square": ("square", "Square"),
    "hubspot": ("hubspot", "HubSpot"),
    "paddle": ("paddle", "Paddle"),
    # Senders with a signature inside the body, a handshake to answer or a shared token.
    "mailgun": ("mailgun", "Mailgun"),
    "linear": ("linear", "Linear"),
    "zoom": ("zoom", "Zoom"),
    "twitch": ("twitch", "Twitch"),
    "gitlab": ("gitlab", "GitLab"),
    # Named presets of the schemes above: Standard Webhooks senders, body-HMAC senders (the
    # X-Hub-Signature family and its cousins), Stripe's header shape, and three of their own.
    "clerk": ("standard_webhooks_senders", "Clerk"),
    "resend": ("standard_webhooks_senders", "Resend"),
    "openai": ("standard_webhooks_senders", "OpenAI"),
    "replicate": ("standard_webhooks_senders", "Replicate"),
    "polar": ("standard_webhooks_senders", "Polar"),
    "intercom": ("body_hmac", "Intercom"),
    "bitbucket": ("body_hmac", "Bitbucket"),
    "jira": ("body_hmac", "Jira"),
    "gitea": ("body_hmac", "Gitea"),
    "typeform": ("body_hmac", "Typeform"),
    "sentry": ("body_hmac", "Sentry"),
    "vercel": ("body_hmac", "Vercel"),
    "lemonsqueezy": ("body_hmac", "LemonSqueezy"),
    "razorpay": ("body_hmac", "Razorpay"),
    "coinbase-commerce": ("body_hmac", "CoinbaseCommerce"),
    "checkout-com": ("body_hmac", "CheckoutCom"),
    "cal-com": ("body_hmac", "CalCom"),
    "woocommerce": ("body_hmac", "WooCommerce"),
    "calendly": ("stripe", "Calendly"),
    "mux": ("stripe", "Mux"),
    "zendesk": ("zendesk", "Zendesk"),
    "docusign": ("docusign", "DocuSign"),
    "telegram": ("telegram", "Telegram"),
    # Senders that sign with a certificate they name by URL (certificates.py fetches or pins it).
    "sns": ("sns", "Sns"),
    "paypal": ("paypal", "PayPal"),
    # Senders of signed tokens: a JWT with keys fetched or pinned by kid (jose.py, key_sets.py),
    # a JWS carrying its certificate chain to an embedded root.
    "google-pubsub": ("google_pubsub", "GooglePubSub"),
    "plaid": ("plaid", "Plaid"),
    "app-store": ("app_store", "AppStore"),
    # Signatures inside the body, and senders whose endpoint answers a challenge first.
    "adyen": ("adyen", "Adyen"),
    "braintree": ("braintree", "Braintree"),
    "meta": ("challenges", "Meta"),
    "whatsapp": ("challenges", "WhatsApp"),
    "x": ("challenges", "X"),
    "dropbox": ("challenges", "Dropbox"),
    "asana": ("event_lists", "Asana"),
    "xero": ("event_lists", "Xero"),
    "microsoft-graph": ("shared_tokens", "MicrosoftGraph"),
    "okta": ("shared_tokens", "Okta"),
}
_MODULE_OF_CLASS = {class_name: module for module, class_name in _CLASS_OF_SCHEME.values()}


def _scheme_class(module: str, class_name: str) -> Any:
    return getattr(importlib.import_module(f"{__name__}.{module}"), class_name)


def __getattr__(name: str) -> Any:
    """``schemes.Stripe`` and the other scheme classes, imported on first access."""
    module = _MODULE_OF_CLASS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _scheme_class(module, name)


class _Registry(Mapping[str, type[Scheme]]):
    """Every scheme by name; a scheme's class (and module) is loaded when it is looked up."""

    def __getitem__(self, name: str) -> type[Scheme]:
        cls: type[Scheme] = _scheme_class(*_CLASS_OF_SCHEME[name])
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter(_CLASS_OF_SCHEME)

    def __len__(self) -> int:
        return len(_CLASS_OF_SCHEME)


SCHEMES: Mapping[str, type[Scheme]] = _Registry()


def build(name: str, options: Mapping[str, Any] | None = None) -> Scheme:
    if name not in _CLASS_OF_SCHEME:
        raise ConfigurationError(f"unknown scheme {name!r}; one of {sorted(_CLASS_OF_SCHEME)}")
    return SCHEMES[name](options)
