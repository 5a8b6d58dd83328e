"""What a domain handler works with: its signature, payload accessors, and outbox messages.

A handler is ``handler(conn, event) -> None``. It runs inside the batch's transaction, so
everything it writes — domain rows, outbox messages — commits together with the event's
``processed`` mark, or not at all. It must not commit, roll back (by call or SQL: the processor
dead-letters such an event, see :mod:`webhook_inbox.processing.handler_guard`) or open its own
connection. It may run twice in one invocation (see :mod:`webhook_inbox.processing.passes`: a
first, pipelined run that is rolled back when anything in the batch fails), so it must not count on
running once. In that pipelined run a statement waits only when its answer is read: read the
answers you need, and let an error propagate rather than catching driver errors (a failure may
belong to an earlier statement). Raise :class:`~webhook_inbox.errors.PermanentEventError` when
retrying cannot help (the event goes to ``dead_letter`` at once) and
:class:`~webhook_inbox.errors.RetryableEventError` (or anything else) when it can. Exception
messages of these two classes are stored and logged: keep payload values out of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

from psycopg import Connection

from webhook_inbox.errors import PermanentEventError
from webhook_inbox.store import outbox
from webhook_inbox.store.inbox import LeasedEvent

Handler = Callable[[Connection[Any], LeasedEvent], None]

T = TypeVar("T")

_MAX_DEDUPLICATION_KEY = 512


def deduplication_key(event: LeasedEvent, topic: str) -> str:
    """Stable per (provider, provider event id, topic): a redelivered event re-derives it."""
    key = f"{event.provider}:{event.event_id}:{topic}"
    if len(key) <= _MAX_DEDUPLICATION_KEY:
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def emit(conn: Connection[Any], event: LeasedEvent, *, topic: str, payload: Any) -> None:
    """Queue an outbox message in the handler's transaction (once per event and topic).

    Returns nothing on purpose: not waiting for the answer saves the processor a round trip per
    message (see :mod:`webhook_inbox.processing.passes`). A redelivered event re-derives the same
    deduplication key, so its message is stored once.
    """
    outbox.queue_message(
        conn,
        topic=topic,
        deduplication_key=deduplication_key(event, topic),
        payload=payload,
        source_event_id=event.id,
    )


def forward(conn: Connection[Any], event: LeasedEvent) -> None:
    """A built-in handler: the verified event, unchanged, to the outbox's destination (the
    EventBridge bus or SNS topic), with topic ``<provider>.<event type>`` (EventBridge's
    detail-type): route it with rules instead of Python. Register it for a key, a pattern
    included: ``("stripe", "*"): forward``."""
    emit(conn, event, topic=f"{event.provider}.{event.event_type}", payload=event.payload)


def optional_field(
    document: Any, path: str, kind: type[T], *, max_length: int | None = None
) -> T | None:
    """The value at dotted ``path`` (None when absent); PermanentEventError if it is malformed.

    Errors name the path, never the value: error messages are stored and logged.
    """
    value: Any = document
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return None
    # bool is an int subclass; a true/false where a number belongs is a schema violation.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PermanentEventError(f"payload field {path} is not a {kind.__name__}")
    if max_length is not None and isinstance(value, str) and not 0 < len(value) <= max_length:
        raise PermanentEventError(f"payload field {path} must have 1..{max_length} characters")
    return value


def required_field(document: Any, path: str, kind: type[T], *, max_length: int | None = None) -> T:
    """:func:`optional_field` for a value that must be present."""
    value = optional_field(document, path, kind, max_length=max_length)
    if value is None:
        raise PermanentEventError(f"payload lacks {path}")
    return value


# What a handler module imports: the event it is given comes from here too.
__all__ = [
    "Handler",
    "LeasedEvent",
    "deduplication_key",
    "emit",
    "forward",
    "optional_field",
    "required_field",
]
