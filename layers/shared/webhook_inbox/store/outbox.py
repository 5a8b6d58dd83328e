"""Data layer for the transactional outbox (outbox_messages). SQL in ``sql/outbox.sql``.

Deduplication keys live in ``outbox_message_keys`` (the table is partitioned by day once the
sweeper has switched it: :mod:`webhook_inbox.store.partition_switch`); :func:`add_message` keeps
them in the same statement as the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from webhook_inbox.errors import StoreError
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

_statement = SqlFile("outbox").statement


@dataclass(frozen=True)
class OutboxMessage:
    id: int
    topic: str
    deduplication_key: str
    payload: Any
    attempts: int
    source_event_id: int | None


@dataclass(frozen=True)
class OutboxBacklog:
    pending: int
    dead: int
    oldest_pending_created_at: datetime | None
    oldest_pending_age_seconds: float


@translated
def add_message(
    conn: Connection[Any],
    *,
    topic: str,
    deduplication_key: str,
    payload: Any,
    source_event_id: int | None,
) -> bool:
    """Queue a message in the caller's transaction; False if its key was already queued."""
    row = conn.execute(
        _statement("add_message"),
        {
            "topic": topic,
            "deduplication_key": deduplication_key,
            "payload": Jsonb(payload),
            "source_event_id": source_event_id,
        },
    ).fetchone()
    return row is not None and row[0] is not None


@translated
def queue_message(
    conn: Connection[Any],
    *,
    topic: str,
    deduplication_key: str,
    payload: Any,
    source_event_id: int | None,
) -> None:
    """:func:`add_message` without reading whether the key was new.

    Not reading the answer lets the statement travel with the next one in pipeline mode (the
    processor's fast path) instead of costing a round trip of its own; a failure still surfaces,
    at the connection's next wait, and fails the transaction.
    """
    conn.execute(
        _statement("add_message"),
        {
            "topic": topic,
            "deduplication_key": deduplication_key,
            "payload": Jsonb(payload),
            "source_event_id": source_event_id,
        },
    )


# Below every id: no bound (ids of the table before its switch to partitions start at 1).
_ANY_ID = -(1 << 63)


@translated
def oldest_pending_message(conn: Connection[Any]) -> int | None:
    """The id of the oldest message still owed publishing; None if there is none."""
    row = conn.execute(_statement("oldest_pending_message")).fetchone()
    return None if row is None else row[0]


@translated
def claim_messages(
    conn: Connection[Any], *, limit: int, lease_seconds: float, from_id: int | None = None
) -> list[OutboxMessage]:
    """Lease up to ``limit`` due messages (FOR UPDATE SKIP LOCKED, then a time lease), only
    among ids from ``from_id`` (:func:`oldest_pending_message`, read once per run: the planner
    then leaves out every day before it)."""
    if lease_seconds <= 0:
        raise ValueError("a lease must be positive")
    params = {
        "limit": limit,
        "lease_seconds": lease_seconds,
        "from_id": _ANY_ID if from_id is None else from_id,
    }
    with conn.cursor(row_factory=class_row(OutboxMessage)) as cur:
        cur.execute(_statement("claim_messages"), params)
        return cur.fetchall()


@translated
def mark_published(conn: Connection[Any], ids: Sequence[int]) -> int:
    return conn.execute(_statement("mark_published"), {"ids": list(ids)}).rowcount


@translated
def mark_retry(conn: Connection[Any], message_id: int, *, delay_seconds: float, error: str) -> None:
    conn.execute(
        _statement("mark_retry"), {"id": message_id, "delay_seconds": delay_seconds, "error": error}
    )


@translated
def mark_dead(conn: Connection[Any], message_id: int, *, error: str) -> None:
    conn.execute(_statement("mark_dead"), {"id": message_id, "error": error})


@translated
def message_backlog(conn: Connection[Any]) -> OutboxBacklog:
    with conn.cursor(row_factory=class_row(OutboxBacklog)) as cur:
        row = cur.execute(_statement("message_backlog")).fetchone()
    if row is None:  # cannot happen: an aggregate without GROUP BY returns one row
        raise StoreError("message_backlog query returned no row")
    return row


@translated
def delete_published(conn: Connection[Any], *, older_than_days: int, limit: int) -> int:
    """Delete published messages created before the cutoff (bounded, SKIP LOCKED), with their
    keys; how many went. In a day's partition, only once its whole day is past the cutoff: what
    retention by partition left (statement ``delete_published``)."""
    if older_than_days < 1 or limit < 1:
        raise ValueError("retention days and batch limit must be positive")
    params = {"days": older_than_days, "limit": limit}
    row = conn.execute(_statement("delete_published"), params).fetchone()
    return int(row[0]) if row else 0


@translated
def drop_inbox_reference(conn: Connection[Any]) -> None:
    """Drop the foreign key to the inbox (the switch to partitions, in its transaction)."""
    conn.execute(_statement("drop_inbox_reference"))


@translated
def forget_source_events(conn: Connection[Any], *, low: int, high: int) -> None:
    """Clear the source of messages naming an inbox row with an id in [low, high)."""
    conn.execute(_statement("forget_source_events"), {"low": low, "high": high})


@translated
def forget_source_event_ids(conn: Connection[Any], ids: Sequence[int]) -> None:
    """Clear the source of messages naming one of these (deleted) inbox rows."""
    conn.execute(_statement("forget_source_event_ids"), {"ids": list(ids)})


@translated
def release_claims(conn: Connection[Any], ids: Sequence[int]) -> None:
    """Give back claimed messages that were never tried (their attempt is not counted)."""
    conn.execute(_statement("release_claims"), {"ids": list(ids)})


@translated
def next_due(conn: Connection[Any], *, key_days: int) -> float | None:
    """When the sweeper next has outbox work (epoch seconds, database clock); None: never,
    unless a function writes first (statement ``next_due_message``)."""
    row = conn.execute(_statement("next_due_message"), {"key_days": key_days}).fetchone()
    return None if row is None else row[0]
