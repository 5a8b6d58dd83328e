"""What an operator reads: listings (keyset pages), one event and its audit trail, the status.

Plain functions over a psycopg connection in autocommit mode; the statements are the named
blocks of ``sql/operator_actions.sql`` beside this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from webhook_inbox.store import inbox, inbox_upkeep, outbox
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

OUTBOX_STATUSES = ("pending", "published", "dead")
# Enough to page through any listing in a few round trips without holding large results (the
# CLI on a database of its own; the operator function caps its pages lower: function_url.py).
MAX_PAGE = 1000

statement = SqlFile("operator_actions", package="webhook_inbox.operations").statement


@dataclass(frozen=True)
class EventFilter:
    statuses: Sequence[str] = ()
    provider: str | None = None
    event_type: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    # An event id or the provider's own delivery id (GitHub's and Shopify's differ from the key).
    some_id: str | None = None

    def is_empty(self) -> bool:
        return not (
            self.statuses
            or self.provider
            or self.event_type
            or self.since
            or self.until
            or self.some_id
        )

    def params(self) -> dict[str, Any]:
        return {
            "statuses": list(self.statuses) or None,
            "provider": self.provider,
            "event_type": self.event_type,
            "since": self.since,
            "until": self.until,
            "some_id": self.some_id,
        }


@dataclass(frozen=True)
class OutboxFilter:
    statuses: Sequence[str] = ()
    topic: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    source_event: int | None = None  # the inbox row id of the event that emitted them

    def params(self) -> dict[str, Any]:
        return {
            "statuses": list(self.statuses) or None,
            "topic": self.topic,
            "since": self.since,
            "until": self.until,
            "source_event": self.source_event,
        }


@dataclass(frozen=True)
class Page:
    """One page of a keyset-paginated listing, newest first; ``next_cursor`` is None at the end."""

    rows: list[dict[str, Any]]
    next_cursor: int | None


def _page(
    conn: Connection[Any], name: str, params: dict[str, Any], limit: int, max_page: int
) -> Page:
    if not 1 <= limit <= max_page:
        raise ValueError(f"limit must be between 1 and {max_page}")
    with conn.cursor(row_factory=dict_row) as cur:
        # One row more than asked tells whether another page exists without a count(*).
        rows = cur.execute(statement(name), {**params, "limit": limit + 1}).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, int(rows[-1]["id"]) if more else None)


@translated
def list_events(
    conn: Connection[Any],
    where: EventFilter,
    *,
    limit: int = 50,
    cursor: int | None = None,
    max_page: int = MAX_PAGE,
) -> Page:
    return _page(conn, "list_events", {**where.params(), "before_id": cursor}, limit, max_page)


@translated
def list_outbox(
    conn: Connection[Any],
    where: OutboxFilter,
    *,
    limit: int = 50,
    cursor: int | None = None,
    max_page: int = MAX_PAGE,
) -> Page:
    return _page(conn, "list_outbox", {**where.params(), "before_id": cursor}, limit, max_page)


@translated
def find_events(
    conn: Connection[Any], provider: str, event_ids: Sequence[str]
) -> list[dict[str, Any]]:
    """The rows for explicit ids, in the order given (missing ids are simply absent)."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            statement("find_events"), {"provider": provider, "event_ids": list(event_ids)}
        ).fetchall()
    by_id = {r["event_id"]: r for r in rows}
    return [by_id[e] for e in dict.fromkeys(event_ids) if e in by_id]


@dataclass(frozen=True)
class FoundEvent:
    """What an id an operator typed names: the event's key (its own, or the one stored under
    that provider delivery id), or why none (``problem``)."""

    event_id: str | None
    by_delivery_id: bool = False
    problem: str = ""
    candidates: tuple[str, ...] = ()  # the events a delivery id names, when it names several


def resolve_event_id(conn: Connection[Any], provider: str, some_id: str) -> FoundEvent:
    """``some_id`` as an event's key, else as the provider's delivery id (GitHub and Shopify
    show their delivery id while the row is keyed by a digest of the type and body)."""
    if find_events(conn, provider, [some_id]):
        return FoundEvent(some_id)
    matches = event_ids_by_delivery_id(conn, provider, some_id)
    if len(matches) == 1:
        return FoundEvent(matches[0], by_delivery_id=True)
    if matches:
        return FoundEvent(
            None,
            problem=f"delivery id {some_id!r} names {len(matches)} events from {provider!r}; "
            "name one by its event id",
            candidates=tuple(matches),
        )
    return FoundEvent(
        None,
        problem=f"no event {some_id!r} from provider {provider!r} "
        "(neither an event id nor a delivery id)",
    )


# More than one event per delivery id happens only when a captured delivery is replayed under
# another type header; a handful is plenty to show the operator what to choose from.
_DELIVERY_ID_MATCHES = 10


@translated
def event_ids_by_delivery_id(conn: Connection[Any], provider: str, delivery_id: str) -> list[str]:
    """The event ids stored under a provider's own delivery id (oldest first, at most ten)."""
    rows = conn.execute(
        statement("event_ids_by_delivery_id"),
        {"provider": provider, "delivery_id": delivery_id, "limit": _DELIVERY_ID_MATCHES},
    ).fetchall()
    return [str(r[0]) for r in rows]


@translated
def get_event(conn: Connection[Any], provider: str, event_id: str) -> dict[str, Any] | None:
    """Every field an operator is shown of one event (not its payload)."""
    return inbox.get_event(conn, provider, event_id)


@translated
def event_payload(conn: Connection[Any], event_row_id: int) -> Any:
    row = conn.execute(statement("event_payload"), {"id": event_row_id}).fetchone()
    return None if row is None else row[0]


@translated
def event_actions(conn: Connection[Any], event_row_id: int) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(statement("event_actions"), {"id": event_row_id}).fetchall()


# --- status --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemStatus:
    events: dict[str, inbox.StatusSummary]
    oldest_unfinished_received_at: datetime | None
    live_leases: int
    expired_leases: int
    outbox: outbox.OutboxBacklog


@translated
def system_status(conn: Connection[Any]) -> SystemStatus:
    row = conn.execute(statement("inbox_extremes")).fetchone()
    oldest, live, expired = row if row is not None else (None, 0, 0)
    return SystemStatus(
        events=inbox_upkeep.status_summary(conn),
        oldest_unfinished_received_at=oldest,
        live_leases=int(live),
        expired_leases=int(expired),
        outbox=outbox.message_backlog(conn),
    )


# --- traffic -------------------------------------------------------------------------------


@translated
def traffic(
    conn: Connection[Any], since: datetime, until: datetime | None, bucket_seconds: int
) -> dict[str, Any]:
    """Per provider over [since, until): events first received, redeliveries of the events
    delivered in it and the latest delivery; and arrivals per provider per bucket (the buckets
    start at ``since``). Rejected deliveries are never stored: a stack's metrics count them."""
    params = {"since": since, "until": until, "bucket_seconds": bucket_seconds}
    with conn.cursor(row_factory=dict_row) as cur:
        providers = cur.execute(statement("provider_traffic"), params).fetchall()
        arrivals = cur.execute(statement("arrivals"), params).fetchall()
    return {"providers": providers, "arrivals": arrivals}
