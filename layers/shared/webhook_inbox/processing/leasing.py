"""The processor's lease of one chunk of a batch's rows (:mod:`webhook_inbox.processing.batch`).

One autocommit statement leases the claimable rows; the rows it dead-lettered instead (taken
over from an expired lease with their attempts spent) come back apart for the processor to
report; claimable rows skipped because a statement held their lock get a second try; every
other id is logged as not claimable (acknowledged) or unknown (poison).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg

from webhook_inbox import observability
from webhook_inbox.store import db, inbox
from webhook_inbox.store.inbox import LeasedEvent, Leases
from webhook_inbox.store.store_errors import translate

logger = observability.lean_logger()  # the process's one Powertools logger (same handler)

APPLICATION_NAME = "webhook-inbox-processor"
# How long to let a row lock taken by a one-statement transaction (a duplicate delivery's claim,
# a concurrent lease) clear before the second and last attempt to lease a skipped received row.
LOCKED_ROW_RETRY_S = 0.2


@dataclass(frozen=True)
class ChunkLease:
    leased: list[LeasedEvent]
    dead_lettered: list[LeasedEvent]  # by the lease itself, as lease_expired
    skipped_while_locked: set[int]  # claimable but not leased: SQS must deliver them again
    unknown: int  # ids with no row (poison: acknowledged)
    held: list[int]  # an active pause matched them: held, acknowledged
    failing: set[str]  # providers with a handler in a run of failures (see circuits.py)


def _prepare_kept_connection() -> psycopg.Connection[Any]:
    """The kept connection, out of any transaction a cut-short invocation left, in autocommit."""
    conn = db.get_connection(application_name=APPLICATION_NAME)
    with translate():
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()  # a previous invocation was cut short inside a transaction
        # A lone statement commits by itself (no BEGIN/COMMIT round trips); the batch opens its
        # own transaction.
        conn.autocommit = True
    return conn


def lease_chunk(
    row_ids: list[int], *, owner: str, lease_seconds: float, max_attempts: int
) -> ChunkLease:
    """Lease ``row_ids`` for ``owner``.

    A row taken over from an expired lease with its attempts spent is dead-lettered by the
    lease itself, as the sweeper's expiry would have done, and never runs again.
    """
    _prepare_kept_connection()
    # One autocommit statement: safe to repeat on a fresh connection when the kept one was
    # closed while the function was frozen. Should the first attempt have committed before the
    # connection dropped, its rows are leased and the retry skips them: the sweeper takes them
    # back when that lease expires. Nothing runs twice.
    first, _ = db.run_repeatable(
        lambda c: inbox.take_leases(
            c, row_ids, owner=owner, lease_seconds=lease_seconds, max_attempts=max_attempts
        ),
        application_name=APPLICATION_NAME,
    )
    conn = db.get_connection(application_name=APPLICATION_NAME)
    again = _lease_briefly_locked(
        conn, row_ids, first, owner=owner, seconds=lease_seconds, max_attempts=max_attempts
    )
    leased = first.leased + again.leased
    dead = first.dead_lettered + again.dead_lettered
    held = first.held + again.held
    taken = {event.id for event in leased + dead} | set(held)
    not_leased = [row_id for row_id in row_ids if row_id not in taken]
    skipped, unknown = set[int](), 0
    if not_leased:
        with translate():
            skipped, unknown = _report_not_leased(conn, not_leased)
    return ChunkLease(leased, dead, skipped, unknown, held, first.failing | again.failing)


def _lease_briefly_locked(
    conn: psycopg.Connection[Any],
    row_ids: list[int],
    first: Leases,
    *,
    owner: str,
    seconds: float,
    max_attempts: int,
) -> Leases:
    """Try once more for claimable rows the lease skipped because their lock was taken.

    A claimable row (``received``, or ``failed`` and due) was passed by SKIP LOCKED only because
    a statement held its lock at that instant: a duplicate delivery's claim (``ON CONFLICT DO
    UPDATE`` locks the row to count it), or another worker's lease (whose one-statement
    transaction commits at once, after which the row is ``processing`` and not ours to take).
    Ingest and the sweeper stamp ``enqueued_at`` and commit before they send, so the wake-up
    itself never races a lock.
    """
    taken = {event.id for event in first.leased + first.dead_lettered} | set(first.held)
    missing = [row_id for row_id in row_ids if row_id not in taken]
    if not missing:
        return Leases()
    skipped = sorted(_claimable(conn, missing))
    if not skipped:
        return Leases()
    time.sleep(LOCKED_ROW_RETRY_S)
    return inbox.take_leases(
        conn, skipped, owner=owner, lease_seconds=seconds, max_attempts=max_attempts
    )


def _claimable(conn: psycopg.Connection[Any], row_ids: list[int]) -> set[int]:
    return {
        row_id for row_id, (_, claimable) in inbox.statuses_of(conn, row_ids).items() if claimable
    }


def _report_not_leased(conn: psycopg.Connection[Any], row_ids: list[int]) -> tuple[set[int], int]:
    """Log why rows were not leased; return the claimable ones, which SQS must redeliver, and
    how many ids have no row.

    A claimable row was skipped only because another statement held its row lock at that
    instant (see :func:`_lease_briefly_locked`). Acknowledging it would leave it waiting for the
    sweeper's stale re-enqueue.
    """
    found = inbox.statuses_of(conn, row_ids)
    for row_id in row_ids:
        if row_id not in found:
            logger.warning("unknown inbox id acknowledged", extra={"row_id": row_id})
        elif found[row_id][1]:
            logger.info("event locked elsewhere, redelivered", extra={"row_id": row_id})
        else:
            logger.info(
                "event not claimable, acknowledged",
                extra={"row_id": row_id, "status": found[row_id][0]},
            )
    claimable = {row_id for row_id, (_, claimable) in found.items() if claimable}
    return claimable, len(set(row_ids) - set(found))
