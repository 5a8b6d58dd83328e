"""Process one SQS batch of inbox ids: lease, run handlers, commit, schedule retries.

The flow for a batch (the SQS messages only carry ``{"id": <inbox row id>}``, or the sweeper's
re-wake ``{"ids": [<row id>, …]}``: :mod:`webhook_inbox.wakeups`):

1. Parse every body. A body that is neither can never succeed: it is logged, counted
   (``PoisonMessages``) and acknowledged.
2. Take the union of the batch's ids ``MAX_ROWS_PER_LEASE`` at a time (re-wakes may name 250
   rows; memory was measured for 10): each chunk is leased, run (steps 3-5) and committed before
   the next is leased; when time runs short the chunks not yet leased are handed back untouched.
   A chunk is leased in one autocommit statement (one round trip, committed at once, so the
   lease and its attempt count stand whatever happens next). Ids that come back unleased are
   terminal, leased by a live worker, not yet due, or unknown: acknowledged, because the
   database — not SQS — owns retries. A row taken over from an expired lease with its attempts
   spent is dead-lettered by the lease itself and reported as a ``dead_letter`` outcome
   (``lease_expired``) like any other.
   A row whose previous attempt ended in an expired lease (``lease_expired``: the worker was
   killed, most often because a handler of its batch ran the invocation out of time) is a
   suspect: its lease is handed back at once, and it runs after the rest (step 4).
3. One transaction for the batch: the handlers' writes, their outbox messages and the
   ``processed`` marks commit together. First the fast pass (:mod:`webhook_inbox.processing.passes`:
   pipeline mode, one batched mark, nothing waited for but the handlers' reads), which commits
   only if every event went through. If anything failed it rolls back, and the careful pass runs
   the batch again with one savepoint per event: a failing event rolls back to its savepoint and
   is marked ``failed`` (backoff with jitter), ``dead_letter`` (permanent error or attempts
   spent; at once for a handler that ended or rewound the transaction) or, without a handler,
   ``ignored``.
4. Suspects, one at a time, fewest attempts first: each leased just before its handler runs and
   committed on its own, so an invocation killed by one suspect charges that one only; the
   suspects after it were never leased (the killed batch's other rows had their attempt
   charged once, when nothing could tell them apart; repeated, they would all have been
   dead-lettered).
5. After the commits, failed events whose retry is due within SQS's 900 s ``DelaySeconds`` limit
   are sent back to the queue with that delay; longer delays are left to the sweeper. So are
   events of a paced handler key that its rate or concurrency turned away right after the lease
   (:mod:`webhook_inbox.processing.pacing`: handed back unspent, ``deferred``).

SQS must redeliver a record (it becomes a batch item failure) only when the database could not
record its outcome: the connection broke or the commit failed (nothing of that chunk committed but
the leases, which expire; nor of the chunks after it), the invocation ran out of time before
reaching it (a suspect left unstarted or a chunk left unleased included), or its retry wake-up
could not be sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from webhook_inbox import aws, deadlines, observability
from webhook_inbox.errors import StoreError
from webhook_inbox.processing import circuits, leasing, pacing, passes
from webhook_inbox.processing.passes import MAX_ERROR_CHARS, EventResult
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store import db, inbox
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox.wakeups import parse_body

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

logger = observability.lean_logger()
# Gathered during a batch; the entry point puts them into its one summary line per batch.
metrics = Metrics()

# A lease must outlive the invocation that holds it: remaining time plus a margin for the commit
# and for clock skew between Lambda and the database. The floor keeps it positive even when the
# context reports no time left (Powertools idempotency bug #4759: a zero-length "in progress"
# record outlived its Lambda forever).
LEASE_MARGIN_SECONDS = 30.0
MIN_LEASE_SECONDS = 30.0
SQS_MAX_DELAY_SECONDS = 900
# The batch's database work ends this long before the invocation would, to answer SQS in time
# (never sooner than MIN_DEADLINE_S, even when the context reports no time left).
ANSWER_MARGIN_S = 1.0
MIN_DEADLINE_S = 1.0
# Rows leased (and their payloads loaded) at a time: a batch's union of ids, up to 250 with the
# sweeper's re-wakes, runs in chunks this size, the event source mapping's BatchSize, for which
# the processor's memory was measured (bench/processor_memory.py, docs/benchmarks.md).
MAX_ROWS_PER_LEASE = 10


@dataclass(frozen=True)
class QueueMessage:
    message_id: str
    body: str
    # SQS's ApproximateReceiveCount: this delivery of the message is its n-th.
    receive_count: int = 1


def lease_seconds_for(remaining_ms: int) -> float:
    """Lease length for an invocation with ``remaining_ms`` left: never zero or negative."""
    return max(MIN_LEASE_SECONDS, max(remaining_ms, 0) / 1000 + LEASE_MARGIN_SECONDS)


# --- SQS ------------------------------------------------------------------------------------


def sqs_client() -> SQSClient:
    """The process's SQS client (:mod:`webhook_inbox.aws`; tests replace this function)."""
    sqs: SQSClient = aws.client("sqs")
    return sqs


def _send_retry_wakeups(queue_url: str, delays: dict[int, int]) -> set[int]:
    """Send ``{"id": N}`` with DelaySeconds for each row; return the ids that were sent."""
    result = aws.send_wakeups(sqs_client(), queue_url, sorted(delays), delays=delays)
    for exc in result.errors:
        logger.warning("retry wake-up send failed", extra={"error_kind": type(exc).__name__})
    for row_id, code in result.rejected:
        logger.warning("retry wake-up rejected", extra={"row_id": row_id, "error_kind": code})
    return set(result.sent)


def sqs_delay_for(retry_delay_s: float) -> int | None:
    """DelaySeconds for a retry due in ``retry_delay_s``, or None when SQS cannot wait that long.

    Rounded up plus one second, so the message never arrives before the row's ``available_at``
    (an early message would find the row not yet due, be acknowledged, and the wake-up be lost).
    """
    delay = int(retry_delay_s) + (retry_delay_s > int(retry_delay_s)) + 1
    return delay if delay <= SQS_MAX_DELAY_SECONDS else None


# --- the batch ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchOutcome:
    """What a batch came to: the records SQS must deliver again, and each leased event's
    outcome (true once committed) for the entry point to log and count."""

    redeliver: list[str]
    results: list[EventResult]


def process_messages(
    messages: Sequence[QueueMessage],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
    settings: ProcessorSettings,
) -> BatchOutcome:
    """Process a batch: lease, run the passes, schedule retries."""
    # One row id per message, or several in the sweeper's re-wakes ({"ids": [...]}).
    row_ids_of: dict[str, list[int]] = {}
    for message in messages:
        row_ids = parse_body(message.body)
        if row_ids is None:
            logger.warning("poison message acknowledged", extra={"message_id": message.message_id})
            metrics.add_metric(name="PoisonMessages", unit=MetricUnit.Count, value=1)
        else:
            row_ids_of[message.message_id] = row_ids
    if not row_ids_of:
        return BatchOutcome([], [])

    # A database that stops answering must not keep the batch past the invocation's end: SQS
    # would see a timeout instead of the batch handed back (deadlines.deadline cuts the connection).
    answer_within_s = max(remaining_ms() / 1000 - ANSWER_MARGIN_S, MIN_DEADLINE_S)
    with deadlines.deadline(answer_within_s, db.current_connection):
        redeliver_rows, results = _process_in_chunks(
            sorted({row_id for row_ids in row_ids_of.values() for row_id in row_ids}),
            owner=owner,
            remaining_ms=remaining_ms,
            settings=settings,
        )
    # A message comes back if any of its rows must (the others then find their rows done).
    redeliver = [
        mid for mid, row_ids in row_ids_of.items() if not redeliver_rows.isdisjoint(row_ids)
    ]
    return BatchOutcome(hand_back(messages, redeliver, settings), results)


def hand_back(
    messages: Sequence[QueueMessage], redeliver: Sequence[str], settings: ProcessorSettings
) -> list[str]:
    """The messages of ``redeliver`` that SQS delivers again: all but those on their last
    receive before the queue's redrive moves them to its DLQ, which are acknowledged instead.

    A wake-up only says "look at row N"; PostgreSQL holds the row, and the sweeper wakes every
    row whose wake-up is gone (received or failed rows past the stale age, expired leases). So
    a message the processor could not finish — for the whole of a database outage, most often,
    which would move every queued wake-up to the DLQ after its fifth receive and page
    dlq-not-empty beside store-unavailable for the same cause — gives way to the sweeper
    rather than to the DLQ. What still reaches the DLQ is a message whose processing kills the
    invocation every time (a timeout, a memory kill), which never gets to answer.
    """
    last = settings.wakeup_max_receives
    receives = {m.message_id: m.receive_count for m in messages}
    kept = [mid for mid in redeliver if receives.get(mid, 1) < last]
    if len(kept) < len(redeliver):
        logger.info("wake-ups left to the sweeper", extra={"messages": len(redeliver) - len(kept)})
    return kept


def _process_in_chunks(
    row_ids: list[int],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
    settings: ProcessorSettings,
) -> tuple[set[int], list[EventResult]]:
    """Process ``row_ids`` MAX_ROWS_PER_LEASE at a time, each chunk leased, run and committed
    before the next is leased; returns the rows SQS must deliver again and the results.

    Rows never leased (no time left for their chunk, or a database failure in it or before it)
    are handed back untouched: their messages come back, and nothing of theirs is lost.
    """
    redeliver: set[int] = set()
    results: list[EventResult] = []
    for start in range(0, len(row_ids), MAX_ROWS_PER_LEASE):
        if start and remaining_ms() < passes.STOP_MARGIN_MS:
            logger.info("no time left, rows handed back", extra={"rows": len(row_ids) - start})
            return redeliver | set(row_ids[start:]), results
        try:
            chunk_redeliver, chunk_results = _process_chunk(
                row_ids[start : start + MAX_ROWS_PER_LEASE],
                owner=owner,
                remaining_ms=remaining_ms,
                settings=settings,
            )
        except StoreError as exc:
            # The connection broke, or a statement outside any handler (lease, commit) failed:
            # nothing of this chunk committed except the leases, which expire. SQS redelivers
            # it and the chunks not yet leased; the chunks before committed and are reported.
            db.discard_connection()
            logger.error(
                "batch abandoned: database failure",
                extra={"error_kind": type(exc).__name__, "error": str(exc)[:MAX_ERROR_CHARS]},
            )
            return redeliver | set(row_ids[start:]), results
        redeliver |= chunk_redeliver
        results += chunk_results
    return redeliver, results


def _process_chunk(
    row_ids: list[int],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
    settings: ProcessorSettings,
) -> tuple[set[int], list[EventResult]]:
    """Lease ``row_ids``, run the passes and the suspects, commit, schedule retries; returns the
    rows SQS must deliver again and every outcome (dead letters of the lease included)."""
    chunk = _lease_rows(row_ids, owner=owner, remaining_ms=remaining_ms, settings=settings)
    results = _dead_on_takeover(chunk.dead_lettered)
    conn = db.get_connection(application_name="webhook-inbox-processor")
    paced = pacing.pace(conn, chunk.leased, owner=owner)
    results += paced.deferred
    leased, suspects = _set_suspects_aside(conn, paced.leased, owner=owner)
    results += _run_passes(conn, leased, owner=owner, remaining_ms=remaining_ms, settings=settings)
    alone, not_run = _run_suspects_alone(
        conn, suspects, owner=owner, remaining_ms=remaining_ms, settings=settings
    )
    results += alone
    _finish_paced(conn, paced.finish_ids)
    circuits.settle(conn, results, failing=chunk.failing, settings=settings)
    unfinished = sorted(r.event.id for r in results if r.outcome == "unfinished")
    if unfinished:
        _release_unfinished(conn, unfinished, owner=owner)
    redeliver = set(unfinished) | chunk.skipped_while_locked | not_run
    redeliver |= _schedule_retries(conn, results, settings)
    return redeliver, results


def _lease_rows(
    row_ids: list[int],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
    settings: ProcessorSettings,
) -> leasing.ChunkLease:
    """Lease ``row_ids``: the leased events, the rows the lease dead-lettered or a pause held,
    and the claimable rows it could not lease (SQS must redeliver those)."""
    chunk = leasing.lease_chunk(
        row_ids,
        owner=owner,
        lease_seconds=lease_seconds_for(remaining_ms()),
        max_attempts=settings.max_attempts,
    )
    if chunk.unknown:
        metrics.add_metric(name="PoisonMessages", unit=MetricUnit.Count, value=chunk.unknown)
    if chunk.held:
        metrics.add_metric(name="Held", unit=MetricUnit.Count, value=len(chunk.held))
    return chunk


def _dead_on_takeover(dead_lettered: list[LeasedEvent]) -> list[EventResult]:
    """The outcome of each row the lease dead-lettered (committed with the lease): reported and
    counted (DeadLettered) like every other dead letter."""
    return [EventResult(e, "dead_letter", error_kind=inbox.LEASE_EXPIRED) for e in dead_lettered]


def _run_passes(
    conn: psycopg.Connection[Any],
    leased: list[LeasedEvent],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
    settings: ProcessorSettings,
) -> list[EventResult]:
    """The fast pass, and the careful pass when the fast one rolled back."""
    fast = passes.fast(conn, leased, owner=owner, remaining_ms=remaining_ms)
    if fast.results is not None:
        return fast.results
    logger.info(
        "fast pass rolled back, batch run again event by event", extra={"reason": fast.reason}
    )
    results = [EventResult(e, "lease_lost") for e in leased if e.id in fast.lease_lost]
    careful = [e for e in leased if e.id not in fast.lease_lost]
    return results + passes.careful(
        conn, careful, owner=owner, remaining_ms=remaining_ms, settings=settings
    )


def _set_suspects_aside(
    conn: psycopg.Connection[Any], leased: list[LeasedEvent], *, owner: str
) -> tuple[list[LeasedEvent], list[LeasedEvent]]:
    """Split off the rows whose last lease expired and hand their leases back (attempt
    included) until each runs alone; returns (the batch, the suspects in the order to run)."""
    suspects = [event for event in leased if event.error_kind == inbox.LEASE_EXPIRED]
    if not suspects:
        return leased, []
    inbox.release_leases(conn, [event.id for event in suspects], owner=owner)
    logger.info("suspects run one by one", extra={"suspects": len(suspects)})
    suspect_ids = {event.id for event in suspects}
    batch = [event for event in leased if event.id not in suspect_ids]
    return batch, sorted(suspects, key=lambda event: (event.attempts, event.id))


def _run_suspects_alone(
    conn: psycopg.Connection[Any],
    suspects: list[LeasedEvent],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
    settings: ProcessorSettings,
) -> tuple[list[EventResult], set[int]]:
    """Lease, run and commit each suspect on its own; returns its results and the rows it did
    not run (no time left, or not leased), whose messages SQS must deliver again."""
    results: list[EventResult] = []
    not_run: set[int] = set()
    for suspect in suspects:
        if remaining_ms() < passes.STOP_MARGIN_MS:
            not_run.add(suspect.id)
            continue
        leases = inbox.take_leases(
            conn,
            [suspect.id],
            owner=owner,
            lease_seconds=lease_seconds_for(remaining_ms()),
            max_attempts=settings.max_attempts,
        )
        # Released just before: dead-lettered only if another worker took it and died since.
        results += _dead_on_takeover(leases.dead_lettered)
        leased = leases.leased
        if not leased and not leases.dead_lettered:
            # Locked at that instant (a duplicate's claim), or taken by another worker since
            # the release: the redelivered message finds out which (and is acknowledged then).
            not_run.add(suspect.id)
            continue
        results += passes.careful(
            conn, leased, owner=owner, remaining_ms=remaining_ms, settings=settings
        )
    return results, not_run


def _finish_paced(conn: psycopg.Connection[Any], row_ids: list[int]) -> None:
    """Free the paced keys' places of the chunk's admitted events (committed or handed back);
    if that fails, each place frees itself when the event's lease would have expired."""
    try:
        pacing.finish(conn, row_ids)
    except StoreError as exc:
        db.discard_connection()
        logger.warning("paced places not freed", extra={"error_kind": type(exc).__name__})


def _release_unfinished(conn: psycopg.Connection[Any], row_ids: list[int], *, owner: str) -> None:
    """Hand back leases this invocation had no time to use; if that fails, they just expire."""
    try:
        inbox.release_leases(conn, row_ids, owner=owner)
    except StoreError as exc:
        db.discard_connection()
        logger.warning(
            "releasing unstarted leases failed", extra={"error_kind": type(exc).__name__}
        )


def _schedule_retries(
    conn: psycopg.Connection[Any], results: list[EventResult], settings: ProcessorSettings
) -> set[int]:
    """Wake failed and deferred events up on time; return the rows whose wake-up SQS must
    provide instead."""
    delays: dict[int, int] = {}
    for result in results:
        if result.outcome in ("failed", "deferred") and result.retry_delay_s is not None:
            delay = sqs_delay_for(result.retry_delay_s)
            if delay is not None:
                delays[result.event.id] = delay
            # else: longer than SQS can wait; the sweeper enqueues it when it is due.
    if not delays:
        return set()
    if not settings.queue_url:
        logger.warning("PROCESSING_QUEUE_URL unset: SQS redelivers failed events instead")
        return set(delays)
    sent = _send_retry_wakeups(settings.queue_url, delays)
    retried = sum(1 for r in results if r.outcome == "failed" and r.event.id in sent)
    if retried:
        metrics.add_metric(name="Retried", unit=MetricUnit.Count, value=retried)
    if sent:
        try:
            inbox.mark_enqueued(conn, sorted(sent))
        except StoreError as exc:
            # The wake-up is on its way; without the mark the sweeper may send a second one,
            # which finds the row processed or not due and is acknowledged.
            db.discard_connection()
            logger.warning("mark_enqueued failed", extra={"error_kind": type(exc).__name__})
    return set(delays) - sent
