"""Presets of senders that sign the raw body alone with one HMAC in one header.

Each is a fixed configuration of :class:`GenericHmac` (the X-Hub-Signature family and its
cousins): the header, the prefix, hex or base64, SHA-256 or SHA-1, and where the sender puts its
event's id and type. None of them signs a timestamp, so a captured delivery verifies forever
and is only deduplicated; where the id is not inside the signed body, the key is the body digest
with the type (``sha256:<hex of type NUL body>``) and the sender's unsigned delivery header is
kept as ``delivery_id``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Verified
from webhook_inbox.ingest.schemes.hmac_family import GitHub, _Preset


class Intercom(_Preset):
    """Intercom: ``X-Hub-Signature: sha1=<hex HMAC-SHA1 of the body>`` keyed with the app's
    client secret. The notification's ``id`` (``notif_…``) is the key, its ``topic``
    (``conversation.user.created``) the type."""

    name = "intercom"
    digest = "sha1"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Hub-Signature",
        "prefix": "sha1=",
        "id_path": "id",
        "type_path": "topic",
    }


class Bitbucket(_Preset):
    """Bitbucket Cloud and Data Center: ``X-Hub-Signature: sha256=<hex>`` over the body. The
    type is ``X-Event-Key`` (``repo:push``), unsigned; ``X-Request-UUID`` (Cloud) or
    ``X-Request-Id`` (Data Center) is the delivery id."""

    name = "bitbucket"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Hub-Signature",
        "prefix": "sha256=",
        "id_header": "X-Request-UUID",
        "type_header": "X-Event-Key",
    }

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        event = base.bounded_text(
            delivery.headers.get("x-event-key"), "X-Event-Key", base.MAX_TYPE_CHARS
        )
        return self.digest_identity(event, delivery, "x-request-uuid", "x-request-id")


class Jira(_Preset):
    """Jira Cloud admin webhooks with a secret: ``X-Hub-Signature: sha256=<hex>`` over the body.
    The type is the signed body's ``webhookEvent`` (``jira:issue_created``); Jira sends no event
    id, so the key is the body digest, and ``X-Atlassian-Webhook-Identifier`` (kept across
    retries, unsigned) is the delivery id."""

    name = "jira"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Hub-Signature",
        "prefix": "sha256=",
        "id_header": "X-Atlassian-Webhook-Identifier",
        "type_path": "webhookEvent",
    }


class Gitea(GitHub):
    """Gitea (and Forgejo, which sends the same headers too): ``X-Gitea-Signature: <hex>``, the
    HMAC-SHA256 of the body with no prefix; GitHub's shape otherwise (``X-Gitea-Event`` refined
    by the body's ``action``; ``X-Gitea-Delivery`` is the delivery id)."""

    name = "gitea"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Gitea-Signature",
        "id_header": "X-Gitea-Delivery",
        "type_header": "X-Gitea-Event",
    }


class Typeform(_Preset):
    """Typeform: ``Typeform-Signature: sha256=<base64 HMAC-SHA256 of the body>``; the body's
    ``event_id`` is the key, its ``event_type`` (``form_response``) the type."""

    name = "typeform"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "Typeform-Signature",
        "prefix": "sha256=",
        "encoding": "base64",
        "id_path": "event_id",
        "type_path": "event_type",
    }


class Sentry(_Preset):
    """Sentry integration platform: ``Sentry-Hook-Signature: <hex HMAC-SHA256 of the body>``
    keyed with the integration's client secret. ``Sentry-Hook-Timestamp`` is not signed and is
    not checked. The type is ``Sentry-Hook-Resource`` (unsigned) and the body's ``action``
    (``issue.created``); the key is the body digest; ``Request-ID`` is the delivery id."""

    name = "sentry"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "Sentry-Hook-Signature",
        "id_header": "Request-ID",
        "type_header": "Sentry-Hook-Resource",
    }

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        timestamp: int,
        event_id: str | None = None,
        event_type: str | None = None,
        url: str = "",
    ) -> base.Signed:
        # Sentry-Hook-Resource carries the resource without the action ("issue").
        resource = event_type.split(".", 1)[0] if event_type else None
        return super().sign(
            secret, body, timestamp=timestamp, event_id=event_id, event_type=resource, url=url
        )

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        resource = base.bounded_text(
            delivery.headers.get("sentry-hook-resource"), "Sentry-Hook-Resource", 255
        )
        action = payload.get("action")
        if isinstance(action, str) and action:
            resource = base.bounded_text(f"{resource}.{action}", "event type", 255)
        return self.digest_identity(resource, delivery, "request-id")


class Vercel(_Preset):
    """Vercel: ``x-vercel-signature: <hex HMAC-SHA1 of the body>`` keyed with the webhook's
    secret (an integration's: its client secret). The body's ``id`` is the key, ``type``
    (``deployment.succeeded``) the type."""

    name = "vercel"
    digest = "sha1"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "x-vercel-signature",
        "id_path": "id",
        "type_path": "type",
    }


class LemonSqueezy(_Preset):
    """Lemon Squeezy: ``X-Signature: <hex HMAC-SHA256 of the body>``. The type is the signed
    ``meta.event_name`` (``order_created``; ``X-Event-Name`` repeats it, unsigned); no event id
    is sent, so the key is the body digest. Lemon Squeezy counts only 200 as success."""

    name = "lemonsqueezy"
    accepted_status = 200
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Signature",
        "type_path": "meta.event_name",
    }


class Razorpay(_Preset):
    """Razorpay: ``X-Razorpay-Signature: <hex HMAC-SHA256 of the body>`` keyed with the
    webhook secret. The type is the body's ``event`` (``payment.captured``); the key is the body
    digest and ``x-razorpay-event-id`` (the same on every retry, unsigned) the delivery id."""

    name = "razorpay"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Razorpay-Signature",
        "id_header": "x-razorpay-event-id",
        "type_path": "event",
    }


class CoinbaseCommerce(_Preset):
    """Coinbase Commerce: ``X-CC-Webhook-Signature: <hex HMAC-SHA256 of the body>`` keyed with
    the shared secret. The key is the signed ``event.id`` (the outer ``id`` counts delivery
    attempts), the type ``event.type`` (``charge:confirmed``)."""

    name = "coinbase-commerce"
    # "Respond with a 200 HTTP status code to acknowledge receipt", else retried for 3 days.
    accepted_status = 200
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-CC-Webhook-Signature",
        "id_path": "event.id",
        "type_path": "event.type",
    }


class CheckoutCom(_Preset):
    """Checkout.com workflows: ``Cko-Signature: <hex HMAC-SHA256 of the body>`` keyed with the
    webhook action's signature key. The body's ``id`` (``evt_…``) is the key, ``type``
    (``payment_approved``) the type."""

    name = "checkout-com"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "Cko-Signature",
        "id_path": "id",
        "type_path": "type",
    }


class CalCom(_Preset):
    """Cal.com: ``X-Cal-Signature-256: <hex HMAC-SHA256 of the body>`` keyed with the webhook's
    secret. The type is the body's ``triggerEvent`` (``BOOKING_CREATED``); no event id is sent,
    so the key is the body digest."""

    name = "cal-com"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Cal-Signature-256",
        "type_path": "triggerEvent",
    }


class WooCommerce(_Preset):
    """WooCommerce: ``X-WC-Webhook-Signature: <base64 HMAC-SHA256 of the body>``. The body is the
    resource itself; the type is ``X-WC-Webhook-Topic`` (``order.created``, unsigned), the key
    the body digest, ``X-WC-Webhook-Delivery-ID`` the delivery id."""

    name = "woocommerce"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-WC-Webhook-Signature",
        "encoding": "base64",
        "id_header": "X-WC-Webhook-Delivery-ID",
        "type_header": "X-WC-Webhook-Topic",
    }
