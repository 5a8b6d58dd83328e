"""Data layer for the inbox (webhook_events): plain functions over a psycopg connection.

With :mod:`.inbox_upkeep` (the sweeper's statements), the only module that runs SQL on
webhook_events' rows, and every statement it runs is in ``sql/inbox.sql`` (one per state
transition: docs/state-machine.md). Each function is one statement, hence one round trip, but
for two: ``send_batch_marks`` sends one whose answer the caller reads later (after its
pipeline's sync), and ``claim_events`` counts in a second statement the duplicates of rows
older than the last few days, and reads the stored rows and claims the rest when its lock wait
runs out.
None commits: the caller owns the transaction (docs/design.md says which each path uses).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from psycopg import Connection, Cursor
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from webhook_inbox.errors import LeaseLost, StoreConflict, StoreError, StoreLockTimeout
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

# The row types live in inbox_rows (plain data); callers import them from here.
__all__ = [
    "ClaimResult",
    "JsonText",
    "LeasedEvent",
    "Leases",
    "NewEvent",
    "StatusBacklog",
    "StatusSummary",
]

STATUSES = ("received", "processing", "processed", "failed", "dead_letter", "ignored")
TERMINAL_STATUSES = frozenset({"processed", "dead_letter", "ignored"})
# The error kind expire_leases records: the attempt ended without an outcome (a crash, a kill).
LEASE_EXPIRED = "lease_expired"


_statement = SqlFile("inbox").statement


# How long a claim waits for the row lock it needs to count a duplicate. Another duplicate's
# count holds it for a commit (milliseconds); a processor's batch may hold it for seconds.
CLAIM_LOCK_WAIT_MS = 500
# A duplicate of a row still waiting re-sends its wake-up when the row's stamp is older than this
# (claim_events): shorter than ingest's answer deadline, so the retry of a 503 whose claim
# committed always finds it old enough (docs/design.md, "A retry after a 503 ...").
REWAKE_AFTER_S = 2.0


def claim_events(
    conn: Connection[Any],
    *,
    provider: str,
    events: Sequence[NewEvent],
    body_sha256: bytes,
    enqueuing: bool = False,
) -> list[ClaimResult]:
    """Store each authentic event of one delivery once; a duplicate only bumps its delivery
    count. One result per distinct key (a key given twice in ``events`` counts once).

    ``enqueuing``: the caller sends the wake-ups right after this commits, so new rows record
    ``enqueued_at`` now, and so do duplicates of rows still waiting whose stamp is older than
    ``REWAKE_AFTER_S`` (``rewake``: their earlier wake-up may never have been sent); the caller
    must :func:`clear_enqueued` the rows it could not send.

    One round trip, and a second for a duplicate of a row stored before the last few days (or
    whose first claim committed while this one waited on its key). On an autocommit connection
    a duplicate waits at most ``CLAIM_LOCK_WAIT_MS`` for its row's lock: a row locked that long
    exists (its key found it; a plain read confirms it is committed), so the duplicate is
    answered from it, uncounted (``counted`` false). When the first statement's wait runs out,
    its new rows roll back with it, so the keys not stored yet are claimed again.
    """
    first_of_key: dict[str, NewEvent] = {}
    for event in events:
        first_of_key.setdefault(event.event_id, event)
    try:
        claimed = _claim(conn, provider, list(first_of_key.values()), body_sha256, enqueuing)
    except StoreLockTimeout:
        claimed = _stored_claims(conn, provider, list(first_of_key))
    missing = [e for key, e in first_of_key.items() if key not in {c.event_id for c in claimed}]
    if missing:
        # After a lock timeout: a missing key's conflict was an insert of the same key, still
        # uncommitted; if it still is, the lock timeout propagates (503, the sender retries).
        claimed += _claim(conn, provider, missing, body_sha256, enqueuing)
    if len({c.event_id for c in claimed}) != len(first_of_key):
        # A key whose row is gone: retention detached its partition and has not yet forgotten
        # the key (docs/design.md, "Partitions and retention"). 503: the sender's retry, once
        # the key is forgotten, is accepted as new, as any delivery after the key retention.
        raise StoreConflict("an event's stored row is being retired; retry later")
    return claimed


def claim_event(
    conn: Connection[Any],
    *,
    provider: str,
    event_id: str,
    event_type: str,
    body_sha256: bytes,
    payload: Any,
    delivery_id: str | None = None,
    enqueuing: bool = False,
) -> ClaimResult:
    """:func:`claim_events` for a delivery that carries one event."""
    (claim,) = claim_events(
        conn,
        provider=provider,
        events=[NewEvent(event_id, event_type, payload, delivery_id)],
        body_sha256=body_sha256,
        enqueuing=enqueuing,
    )
    return claim


def _claim(
    conn: Connection[Any],
    provider: str,
    events: Sequence[NewEvent],
    body_sha256: bytes,
    enqueuing: bool,
) -> list[ClaimResult]:
    """The new events stored and the duplicates counted, in one round trip; a second counts the
    duplicates the first left (a row stored before the last few days, or one the statement could
    not see: ``count_duplicates``). A duplicate whose row stays locked past the lock wait there
    is answered from the row as committed, uncounted."""
    # In autocommit the statement is its own transaction, so the lock wait applies to it alone;
    # inside a caller's transaction it would outlast the claim, and the session's applies.
    alone = conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    lock_timeout = f"{CLAIM_LOCK_WAIT_MS}ms" if alone else None
    rows = _claim_statement(
        conn, provider, events, body_sha256, enqueuing=enqueuing, lock_timeout=lock_timeout
    )
    # Tuples, not a row factory: the claim is ingest's hot path, and class_row reads the
    # columns' names on every call.
    claimed = [
        ClaimResult(id_, event_id, status, count, is_new, rewake=rewake)
        for id_, event_id, status, count, is_new, rewake in rows
        if status is not None
    ]
    uncounted = {event_id: id_ for id_, event_id, status, *_ in rows if status is None}
    if uncounted:
        try:
            claimed += _count_duplicates(conn, list(uncounted.values()), enqueuing, lock_timeout)
        except StoreLockTimeout:
            claimed += _stored_claims(conn, provider, list(uncounted))
    return claimed


# The days whose duplicates claim_events counts itself (its planner keeps only their partitions):
# a provider's retries come within hours or days; an older duplicate costs a second round trip.
# A day either side of the caller's clock, so that a clock a little off the database's changes
# nothing but which round trip counts a duplicate.
RECENT_DAYS_BACK = 3
RECENT_DAYS_AHEAD = 1


def recent_ids(today: date | None = None) -> tuple[int, int]:
    """The ids of the inbox rows stored in the last ``RECENT_DAYS_BACK`` days (ids carry their
    day: docs/design.md, "Partitions and retention")."""
    day = (today or datetime.now(UTC).date()).toordinal() - _EPOCH_ORDINAL
    return (day - RECENT_DAYS_BACK) << 32, (day + RECENT_DAYS_AHEAD + 1) << 32


_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


@translated
def _claim_statement(
    conn: Connection[Any],
    provider: str,
    events: Sequence[NewEvent],
    body_sha256: bytes,
    *,
    enqueuing: bool,
    lock_timeout: str | None,
) -> list[tuple[Any, ...]]:
    recent_from, recent_until = recent_ids()
    return conn.execute(
        _statement("claim_events"),
        {
            "provider": provider,
            "event_ids": [e.event_id for e in events],
            "delivery_ids": [e.delivery_id for e in events],
            "event_types": [e.event_type for e in events],
            "payloads": payloads_array(e.payload for e in events),
            "body_sha256": body_sha256,
            "enqueuing": enqueuing,
            "rewake_after_s": REWAKE_AFTER_S,
            "lock_timeout": lock_timeout,
            "recent_from": recent_from,
            "recent_until": recent_until,
        },
    ).fetchall()


@translated
def _count_duplicates(
    conn: Connection[Any], ids: list[int], enqueuing: bool, lock_timeout: str | None
) -> list[ClaimResult]:
    rows = conn.execute(
        _statement("count_duplicates"),
        {
            "ids": ids,
            "enqueuing": enqueuing,
            "rewake_after_s": REWAKE_AFTER_S,
            "lock_timeout": lock_timeout,
        },
    ).fetchall()
    return [
        ClaimResult(id_, event_id, status, count, False, rewake=rewake)
        for id_, event_id, status, count, rewake in rows
    ]


def payloads_array(payloads: Iterable[Any]) -> Jsonb:
    """The claim's payloads as one jsonb array, built as text.

    One jsonb, not a jsonb[]: an array parameter is sent as an array literal, which quotes every
    ``"`` of every payload one regex callback at a time (about 0.1 s for a 1 MiB body); a
    :class:`JsonText` goes in as it came, anything else through ``json.dumps`` once.
    """
    parts = [p.text if isinstance(p, JsonText) else json.dumps(p) for p in payloads]
    return Jsonb("[" + ",".join(parts) + "]", dumps=_as_is)


def _as_is(text: str) -> str:
    return text


@translated
def _stored_claims(
    conn: Connection[Any], provider: str, event_ids: Sequence[str]
) -> list[ClaimResult]:
    with conn.cursor(row_factory=class_row(ClaimResult)) as cur:
        cur.execute(
            _statement("stored_claims"), {"provider": provider, "event_ids": list(event_ids)}
        )
        return cur.fetchall()


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
