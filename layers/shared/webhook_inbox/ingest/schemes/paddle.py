"""Paddle Billing: ``Paddle-Signature: ts=…;h1=<hex>[;h1=…]`` over ``{ts}:{body}``."""

from __future__ import annotations

from typing import Any

from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Verified
from webhook_inbox.ingest.schemes.stripe import TimestampedHeader


class Paddle(TimestampedHeader):
    """Paddle Billing notifications: Stripe's header shape with ``;``, ``ts``, ``h1`` and a
    ``:`` before the body; HMAC-SHA256 keyed with the whole destination secret
    (``pdl_ntfset_…``, prefix included) as UTF-8; several ``h1`` during a secret rotation. The
    event id is the signed body's ``event_id``, the type its ``event_type``;
    ``notification_id`` (one per destination) is the delivery id.

    The default tolerance is Paddle's own, 5 seconds (what its SDKs enforce), in both
    directions. Unknown ``key=value`` items in the header are ignored (Paddle's Python SDK
    rejects them; ignoring them keeps a future signature version from failing every
    delivery, and an ``h1`` must still match)."""

    name = "paddle"
    default_tolerance_s = 5
    # Paddle documents a 200 ("respond with HTTP 200 within five seconds"), not any 2xx.
    accepted_status = 200
    header_name = "Paddle-Signature"
    separator = ";"
    time_key = "ts"
    version = "h1"
    joiner = ":"

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        notification = payload.get("notification_id")
        return [
            Identity(
                event_id=base.bounded_text(payload.get("event_id"), "event_id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(
                    payload.get("event_type"), "event_type", base.MAX_TYPE_CHARS
                ),
                delivery_id=(
                    None
                    if notification is None
                    else base.bounded_text(notification, "notification_id", base.MAX_ID_CHARS)
                ),
            )
        ]
