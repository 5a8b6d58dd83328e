"""Every Stripe event forwarded unchanged to the outbox by the built-in handler."""

from __future__ import annotations

from webhook_inbox.processing.domain import Handler, forward

HANDLERS: dict[tuple[str, str], Handler] = {("stripe", "*"): forward}
