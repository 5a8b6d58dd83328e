"""Which handler runs for which (provider, event type): the processor installs this map.

An event whose (provider, type) is not a key here is marked ``ignored``. A handler is a function
``(conn, event) -> None`` (see :mod:`webhook_inbox.processing.domain` for the helpers it may use).

``PACING`` optionally limits a handler key (named exactly as in ``HANDLERS``): events per second
(with a burst) and events running at once, across every processor (docs/handlers.md, "Pacing").
"""

from __future__ import annotations

from webhook_inbox.processing.domain import Handler
from webhook_inbox.processing.pacing import Pacing
from webhook_inbox_app import examples

HANDLERS: dict[tuple[str, str], Handler] = {
    ("stripe", "customer.subscription.updated"): examples.stripe_subscription_updated,
    ("stripe", "customer.created"): examples.stripe_customer_created,
    ("stripe", "customer.deleted"): examples.stripe_customer_deleted,
    ("example", "subscription.updated"): examples.example_subscription_updated,
    ("example", "customer.created"): examples.example_customer_created,
    ("example", "customer.deleted"): examples.example_customer_deleted,
}

# For example, a downstream that allows 10 calls a second and 4 at once:
#     ("stripe", "customer.created"): Pacing(per_second=10, burst=10, concurrency=4),
PACING: dict[tuple[str, str], Pacing] = {}
