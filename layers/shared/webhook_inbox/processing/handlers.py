"""The handler registry: an explicit map from (provider, event type) to a domain handler.

Nothing is looked up by a name built from payload text: an event whose (provider, type) no key
matches is marked ``ignored``. The registry starts empty; the processor's entry point installs
the application's map (``webhook_inbox_app.handlers.HANDLERS``), so adding a handler never
edits this package.

A key's type is exact (``invoice.paid``) or a prefix pattern: ``invoice.*`` matches every type
that starts with ``invoice.``, ``*`` every type of the provider. A ``*`` anywhere but at the end
is refused when the map is installed. The most specific key wins: the exact type, else the
longest matching prefix — with prefixes only, two matching patterns always differ in length, so
the choice is never ambiguous. Per event: one dict lookup, and only when no exact key matches,
one ``startswith`` per pattern of that provider (longest first); no regular expression.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.processing.domain import Handler

HANDLERS: dict[tuple[str, str], Handler] = {}
# Each provider's prefix patterns, longest first: rebuilt whenever a key is registered.
_PATTERNS: dict[str, list[tuple[str, Handler]]] = {}
WILDCARD = "*"


def install(handlers: Mapping[tuple[str, str], Handler]) -> None:
    """Register every handler of an application's map (refuses to overwrite one silently)."""
    for (provider, event_type), handler in handlers.items():
        if HANDLERS.get((provider, event_type)) is not handler:
            register(provider, event_type, handler)


def register(provider: str, event_type: str, handler: Handler, *, replace: bool = False) -> None:
    """Add a handler; refuses to overwrite one silently, and a ``*`` not at the end."""
    key = (provider, event_type)
    if WILDCARD in event_type[:-1] or WILDCARD in provider:
        raise ConfigurationError(
            f"handler key {key}: '*' only ends an event type (invoice.*, or * for every type); "
            "a provider is named in full"
        )
    if key in HANDLERS and not replace:
        raise ConfigurationError(f"a handler for {provider} {event_type} is registered already")
    HANDLERS[key] = handler
    _index()


def _index() -> None:
    _PATTERNS.clear()
    for (provider, event_type), handler in HANDLERS.items():
        if event_type.endswith(WILDCARD):
            _PATTERNS.setdefault(provider, []).append((event_type[:-1], handler))
    for patterns in _PATTERNS.values():
        patterns.sort(key=lambda pattern: len(pattern[0]), reverse=True)


def handler_for(provider: str, event_type: str) -> Handler | None:
    """The handler of the most specific key matching the event: exact, else longest prefix."""
    exact = HANDLERS.get((provider, event_type))
    if exact is not None:
        return exact
    for prefix, handler in _PATTERNS.get(provider, ()):
        if event_type.startswith(prefix):
            return handler
    return None


def key_for(provider: str, event_type: str) -> str | None:
    """The type of the key :func:`handler_for` chose (``invoice.*`` for a pattern), or None."""
    if (provider, event_type) in HANDLERS:
        return event_type
    for prefix, _ in _PATTERNS.get(provider, ()):
        if event_type.startswith(prefix):
            return prefix + WILDCARD
    return None


def clear() -> None:
    """Forget every handler (a new execution environment, or a test's own map)."""
    HANDLERS.clear()
    _PATTERNS.clear()
