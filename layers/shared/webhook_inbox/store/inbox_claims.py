"""Ingest's claim of a delivery's events in the inbox (``webhook_events``): the new ones stored,
the duplicates counted (statements ``claim_events`` and ``count_duplicates`` of
``sql/inbox.sql``). One round trip for a delivery of new or recent events; a second counts the
duplicates of older rows; when the lock wait runs out, the stored rows are read
(``stored_claims``) and the rest claimed again. :mod:`.inbox` re-exports what callers use; the
rest of the inbox's statements are there and in :mod:`.inbox_upkeep`. None commits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from typing import Any

from psycopg import Connection
from psycopg.pq import TransactionStatus
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from webhook_inbox.errors import StoreConflict, StoreLockTimeout
from webhook_inbox.store.inbox_rows import ClaimResult, JsonText, NewEvent
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

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
