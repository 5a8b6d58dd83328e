"""The handler registry: an explicit map from (provider, event type) to a domain handler.

Nothing is looked up by a name built from payload text: an event whose (provider, type) is not a
key here is marked ``ignored``. The registry starts empty; the processor's entry point installs
the application's map (``webhook_inbox_app.handlers.HANDLERS``), so adding a handler never
edits this package.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.processing.domain import Handler

HANDLERS: dict[tuple[str, str], Handler] = {}


def install(handlers: Mapping[tuple[str, str], Handler]) -> None:
    """Register every handler of an application's map (refuses to overwrite one silently)."""
    for (provider, event_type), handler in handlers.items():
        if HANDLERS.get((provider, event_type)) is not handler:
            register(provider, event_type, handler)


def register(provider: str, event_type: str, handler: Handler, *, replace: bool = False) -> None:
    """Add a handler; refuses to overwrite one silently."""
    key = (provider, event_type)
    if key in HANDLERS and not replace:
        raise ConfigurationError(f"a handler for {provider} {event_type} is registered already")
    HANDLERS[key] = handler


def handler_for(provider: str, event_type: str) -> Handler | None:
    return HANDLERS.get((provider, event_type))
