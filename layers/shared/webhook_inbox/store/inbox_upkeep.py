"""The sweeper's statements on the inbox (webhook_events): expired leases, due wake-ups, the
backlog, retention row by row, and when inbox work next comes due. Plain functions over a
psycopg connection, each one statement of ``sql/inbox.sql``, as in :mod:`.inbox` (ingest's and
the processor's); none commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection
from psycopg.rows import class_row

from webhook_inbox.store.inbox import STATUSES
from webhook_inbox.store.inbox_rows import StatusBacklog, StatusSummary
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

_statement = SqlFile("inbox").statement


@translated
def expire_leases(conn: Connection[Any], *, max_attempts: int, limit: int) -> list[tuple[int, str]]:
    """Turn expired leases into failed (due now) or dead_letter rows; returns (id, new status)."""
    rows = conn.execute(
        _statement("expire_leases"), {"max_attempts": max_attempts, "limit": limit}
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


@translated
def claim_due_for_enqueue(
    conn: Connection[Any], *, limit: int, stale_seconds: float, stale_limit: int | None = None
) -> list[tuple[int, str, bool]]:
    """Stamp ``enqueued_at`` on rows that must be sent to the processing queue; return them as
    ``(id, status, stale)``, never-sent rows first: stale rows were sent before, over
    ``stale_seconds`` ago, and are still waiting.

    At most ``limit`` never-sent rows and ``stale_limit`` (default: ``limit``) stale rows. Run it
    in its own (autocommit) transaction, then send, then :func:`clear_enqueued` the never-sent
    rows and :func:`backdate_enqueued` the stale rows whose send failed.
    """
    rows = conn.execute(
        _statement("claim_due_for_enqueue"),
        {
            "limit": limit,
            "stale_seconds": stale_seconds,
            "stale_limit": limit if stale_limit is None else stale_limit,
        },
    ).fetchall()
    return [(int(r[0]), str(r[1]), bool(r[2])) for r in rows]


@translated
def backdate_enqueued(conn: Connection[Any], ids: Sequence[int], *, stale_seconds: float) -> None:
    """The re-wake of these stale rows was not sent: the next sweep re-wakes them again."""
    conn.execute(
        _statement("backdate_enqueued"), {"ids": list(ids), "stale_seconds": stale_seconds}
    )


@translated
def status_summary(conn: Connection[Any]) -> dict[str, StatusSummary]:
    """Count and oldest received_at for every status (zero for absent ones)."""
    with conn.cursor(row_factory=class_row(StatusSummary)) as cur:
        found = {row.status: row for row in cur.execute(_statement("status_summary"))}
    return {s: found.get(s, StatusSummary(s, 0, None)) for s in STATUSES}


@translated
def event_backlog(conn: Connection[Any]) -> dict[str, StatusBacklog]:
    """The backlog of each of received, processing, failed and dead_letter that has rows (the
    terminal statuses are history, not backlog)."""
    with conn.cursor(row_factory=class_row(StatusBacklog)) as cur:
        return {row.status: row for row in cur.execute(_statement("event_backlog"))}


def _retention(conn: Connection[Any], name: str, *, days: int, limit: int) -> int:
    if days < 1 or limit < 1:
        raise ValueError("retention days and batch limit must be positive")
    return conn.execute(_statement(name), {"days": days, "limit": limit}).rowcount


@translated
def purge_payloads(conn: Connection[Any], *, older_than_days: int, limit: int) -> int:
    """Null the payload of processed/ignored rows last changed before the cutoff; row count.

    Bounded (at most ``limit`` rows, SKIP LOCKED) so the caller can stop between batches.
    """
    return _retention(conn, "purge_payloads", days=older_than_days, limit=limit)


@translated
def delete_expired_events(conn: Connection[Any], *, older_than_days: int, limit: int) -> list[int]:
    """Delete terminal rows (processed, ignored, dead_letter) last changed before the cutoff
    that retention by partition leaves (stored before the switch to partitions, or in a day's
    partition an unfinished row keeps, once that whole day is past the cutoff), with their keys
    and attempts; the ids that went (the caller clears the outbox's references to them)."""
    if older_than_days < 1 or limit < 1:
        raise ValueError("retention days and batch limit must be positive")
    row = conn.execute(
        _statement("delete_expired_events"), {"days": older_than_days, "limit": limit}
    ).fetchone()
    return list(row[0]) if row else []


@translated
def forget_attempts(conn: Connection[Any], *, low: int, high: int, limit: int) -> int:
    """Delete up to ``limit`` attempts of the rows with ids in [low, high) (a retired
    partition's); how many went."""
    row = conn.execute(
        _statement("forget_attempts"), {"low": low, "high": high, "limit": limit}
    ).fetchone()
    return int(row[0]) if row else 0


@translated
def next_due(
    conn: Connection[Any], *, stale_seconds: float, payload_days: int, key_days: int
) -> float | None:
    """When the sweeper next has inbox work (epoch seconds, database clock); None: never, unless
    a function writes first (statement ``next_due_event``)."""
    params = {"stale_seconds": stale_seconds, "payload_days": payload_days, "key_days": key_days}
    row = conn.execute(_statement("next_due_event"), params).fetchone()
    return None if row is None else row[0]
