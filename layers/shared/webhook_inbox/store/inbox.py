"""Data layer for the inbox (webhook_events): plain functions over a psycopg connection.

With :mod:`.inbox_claims` (ingest's claim, re-exported here) and :mod:`.inbox_upkeep` (the
sweeper's statements), the only module that runs SQL on webhook_events' rows, and every
statement it runs is in ``sql/inbox.sql`` (one per state transition: docs/state-machine.md).
Each function is one statement, hence one round trip, but for one: ``send_batch_marks`` sends
one whose answer the caller reads later (after its pipeline's sync).
None commits: the caller owns the transaction (docs/design.md says which each path uses).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import Connection, Cursor

from webhook_inbox.errors import LeaseLost, StoreError
from webhook_inbox.store.inbox_claims import (
    CLAIM_LOCK_WAIT_MS,
    RECENT_DAYS_AHEAD,
    RECENT_DAYS_BACK,
    REWAKE_AFTER_S,
    claim_event,
    claim_events,
    payloads_array,
    recent_ids,
)
from webhook_inbox.store.inbox_rows import (
    ClaimResult,
    JsonText,
    LeasedEvent,
    Leases,
    NewEvent,
    StatusBacklog,
    StatusSummary,
)
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

# The row types live in inbox_rows (plain data) and ingest's claim in inbox_claims; callers
# import them from here, with the rest of the inbox.
__all__ = [
    "CLAIM_LOCK_WAIT_MS",
    "RECENT_DAYS_AHEAD",
    "RECENT_DAYS_BACK",
    "REWAKE_AFTER_S",
    "ClaimResult",
    "JsonText",
    "LeasedEvent",
    "Leases",
    "NewEvent",
    "StatusBacklog",
    "StatusSummary",
    "claim_event",
    "claim_events",
    "payloads_array",
    "recent_ids",
]

STATUSES = ("received", "processing", "processed", "failed", "dead_letter", "ignored")
TERMINAL_STATUSES = frozenset({"processed", "dead_letter", "ignored"})
# The error kind expire_leases records: the attempt ended without an outcome (a crash, a kill).
LEASE_EXPIRED = "lease_expired"


_statement = SqlFile("inbox").statement


@translated
def mark_enqueued(conn: Connection[Any], ids: Sequence[int]) -> None:
    conn.execute(_statement("mark_enqueued"), {"ids": list(ids)})


@translated
def clear_enqueued(conn: Connection[Any], ids: Sequence[int]) -> None:
    """The wake-up for ``ids`` was not sent: the next sweep sends it."""
    conn.execute(_statement("clear_enqueued"), {"ids": list(ids)})


@translated
def lease_events(
    conn: Connection[Any],
    ids: Sequence[int],
    *,
    owner: str,
    lease_seconds: float,
    max_attempts: int | None = None,
) -> list[LeasedEvent]:
    """The rows :func:`take_leases` leased among ``ids`` (dead-lettered ones left out)."""
    return take_leases(
        conn, ids, owner=owner, lease_seconds=lease_seconds, max_attempts=max_attempts
    ).leased


@translated
def take_leases(
    conn: Connection[Any],
    ids: Sequence[int],
    *,
    owner: str,
    lease_seconds: float,
    max_attempts: int | None = None,
) -> Leases:
    """Lease the claimable rows among ``ids``; the others are terminal, leased or not yet due.

    A row taken over from an expired lease with ``max_attempts`` spent is dead-lettered as
    ``lease_expired`` (as the sweeper's :func:`expire_leases` would) and returned apart, so the
    caller can report it like any other dead letter; a row an active pause matches is held
    (``Leases.held``: no attempt, no lease) until ``webhook-inbox resume`` or its circuit closes.
    """
    if lease_seconds <= 0:
        raise ValueError("a lease must be positive")
    params = {
        "ids": list(ids),
        "owner": owner,
        "lease_seconds": lease_seconds,
        "max_attempts": max_attempts,
    }
    # Tuples in the statement's column order (LEASE_COLUMNS), not dict rows built into
    # LeasedEvent(**row): the processor leases every batch, and the dicts were 4 % of its client
    # CPU. tests/integration/store/test_inbox_store.py holds the order to the statement's.
    rows = conn.execute(_statement("lease_events"), params).fetchall()
    leases = Leases()
    for (status, row_id, provider, event_id, delivery_id, event_type, payload, attempts,
         received_at, lease_expires_at, error_kind, held, failing) in rows:  # fmt: skip
        if failing:
            leases.failing.add(provider)
        if held:
            leases.held.append(row_id)
            continue
        event = LeasedEvent(
            row_id, provider, event_id, delivery_id, event_type, payload, attempts,
            received_at, lease_expires_at, error_kind,
        )  # fmt: skip
        (leases.leased if status == "processing" else leases.dead_lettered).append(event)
    return leases


# The lease statement's answer, column by column, as take_leases unpacks it.
LEASE_COLUMNS = (
    "status", "id", "provider", "event_id", "delivery_id", "event_type", "payload", "attempts",
    "received_at", "lease_expires_at", "error_kind", "held", "failing",
)  # fmt: skip


def _guarded(conn: Connection[Any], name: str, params: dict[str, Any]) -> Any:
    """Run a lease-guarded transition; raise LeaseLost when the worker no longer owns the row."""
    row = conn.execute(_statement(name), params).fetchone()
    if row is None:
        raise LeaseLost(f"event row {params['id']} is no longer leased by {params['owner']}")
    return row[0]


@translated
def mark_processed(conn: Connection[Any], event_row_id: int, *, owner: str) -> timedelta:
    """Mark one row processed; returns the received → processed latency."""
    latency: timedelta = _guarded(conn, "mark_processed", {"id": event_row_id, "owner": owner})
    return latency


@translated
def send_batch_marks(
    conn: Connection[Any],
    *,
    processed: Sequence[int],
    ignored: Sequence[int],
    owner: str,
    disposition: str,
) -> Cursor[Any]:
    """Send the batch's processed and ignored marks without reading the answer (the fast pass,
    in pipeline mode); read it with :func:`batch_latencies` after the sync. Unless every row is
    still leased to ``owner`` the statement fails, aborting what is queued behind it (the
    batch's COMMIT), and the sync raises :class:`LeaseLost` naming the rows."""
    return conn.execute(
        _statement("mark_batch_done"),
        {
            "processed": list(processed),
            "ignored": list(ignored),
            "owner": owner,
            "disposition": disposition,
        },
    )


@translated
def batch_latencies(sent: Cursor[Any]) -> dict[int, timedelta]:
    """The received → processed latency of each processed row :func:`send_batch_marks` marked."""
    row = sent.fetchone()
    if row is None:  # cannot happen: the statement always answers one row
        raise StoreError("the batch's mark answered no row")
    _, ids, latencies = row
    return dict(zip(ids, latencies, strict=True))


@translated
def mark_failed(
    conn: Connection[Any],
    event_row_id: int,
    *,
    owner: str,
    delay_seconds: float,
    error_kind: str,
    error: str,
) -> datetime:
    """Mark failed and due again after ``delay_seconds``; returns the new ``available_at``."""
    available_at: datetime = _guarded(
        conn,
        "mark_failed",
        {
            "id": event_row_id,
            "owner": owner,
            "delay_seconds": delay_seconds,
            "error_kind": error_kind[:64],
            "error": error,
        },
    )
    return available_at


@translated
def mark_dead_letter(
    conn: Connection[Any], event_row_id: int, *, owner: str, error_kind: str, error: str
) -> None:
    _guarded(
        conn,
        "mark_dead_letter",
        {"id": event_row_id, "owner": owner, "error_kind": error_kind[:64], "error": error},
    )


@translated
def mark_ignored(conn: Connection[Any], event_row_id: int, *, owner: str, disposition: str) -> None:
    _guarded(conn, "mark_ignored", {"id": event_row_id, "owner": owner, "disposition": disposition})


@translated
def release_leases(conn: Connection[Any], ids: Sequence[int], *, owner: str) -> None:
    """Hand back leases never used (no time left): the attempt they counted is given back."""
    conn.execute(_statement("release_leases"), {"ids": list(ids), "owner": owner})


@translated
def statuses_of(conn: Connection[Any], ids: Sequence[int]) -> dict[int, tuple[str, bool]]:
    """``{id: (status, claimable)}`` for the rows that exist; claimable is the lease's condition."""
    rows = conn.execute(_statement("statuses_of"), {"ids": list(ids)}).fetchall()
    return {int(row_id): (str(status), bool(claimable)) for row_id, status, claimable in rows}


@translated
def get_event(conn: Connection[Any], provider: str, event_id: str) -> dict[str, Any] | None:
    cur = conn.execute(_statement("get_event"), {"provider": provider, "event_id": event_id})
    row = cur.fetchone()
    if row is None:
        return None
    columns = [c.name for c in cur.description or ()]
    return dict(zip(columns, row, strict=True))
