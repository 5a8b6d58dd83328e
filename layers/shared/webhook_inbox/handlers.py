"""The handler registry: an explicit map from (provider, event type) to a domain handler.

Nothing is looked up by a name built from payload text: an event whose (provider, type) is not a
key here is marked ``ignored``. To add a handler, write a function ``(conn, event) -> None`` (see
:mod:`webhook_inbox.domain`) and add one line to ``HANDLERS`` — or call :func:`register` from
your own module at import time.
"""

from __future__ import annotations

from webhook_inbox import examples
from webhook_inbox.domain import Handler
from webhook_inbox.errors import ConfigurationError

HANDLERS: dict[tuple[str, str], Handler] = {
    ("stripe", "customer.subscription.updated"): examples.stripe_subscription_updated,
    ("stripe", "customer.created"): examples.stripe_customer_created,
    ("stripe", "customer.deleted"): examples.stripe_customer_deleted,
    ("example", "subscription.updated"): examples.example_subscription_updated,
    ("example", "customer.created"): examples.example_customer_created,
    ("example", "customer.deleted"): examples.example_customer_deleted,
}


def register(provider: str, event_type: str, handler: Handler, *, replace: bool = False) -> None:
    """Add a handler; refuses to overwrite one silently."""
    key = (provider, event_type)
    if key in HANDLERS and not replace:
        raise ConfigurationError(f"a handler for {provider} {event_type} is registered already")
    HANDLERS[key] = handler


def handler_for(provider: str, event_type: str) -> Handler | None:
    return HANDLERS.get((provider, event_type))
