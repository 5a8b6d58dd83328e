"""The processor's two passes over a leased batch, side by side: fast, then careful if needed.

**The fast pass** (:func:`fast`): the batch in one pipelined transaction, checked at the end.

In psycopg's pipeline mode a statement is sent without waiting for its answer; the connection
waits only when a result is read (by a handler), or at the pipeline's closing sync. So a batch
whose handlers each read one result costs one round trip per event and one after them, instead
of one per statement:

* ``BEGIN`` is the pipeline's first statement (:func:`handler_guard.begin_batch`), answered with
  the first wait. Inside the pass the connection refuses a handler's ``commit()`` or
  ``rollback()`` (:func:`webhook_inbox.store.db.handler_batch`), which would otherwise end the
  batch's transaction under the events after it;
* every statement whose answer nobody reads travels with the next wait — among them one before
  each handler, adding its token to a transaction-local list, and one after the last
  (:mod:`webhook_inbox.processing.handler_guard`), which fails unless the list is complete: a
  handler that ended or rewound the transaction (the same as ``commit()``, sent as SQL) took the
  list with it;
* each handler waits where it reads (the example handlers read their conditional write's answer
  to decide whether to emit an outbox message);
* every ``processed`` and ``ignored`` row is marked by one statement (``mark_batch_done``), with
  ``COMMIT`` queued right behind it; the lease guard (status and owner) is in its ``WHERE``, and
  it fails (``LeaseLost``, naming the rows) unless it marked every row it was given;
* the pipeline's closing sync is the last wait: it carries the check, the marks and ``COMMIT``.
  The first error in the pipeline aborts everything after it, so ``COMMIT`` runs only if nothing
  before it failed; the marks' answer (the latencies) is read after it.

The price of not waiting is that an error shows up late — at the connection's next wait, which
may belong to a later event — so this pass does not try to attribute failures. It uses no
savepoints: the first failure of any kind (a handler raises, a statement fails, a handler ended
or rewound the transaction, or a row's lease was lost before the final mark) rolls the whole
transaction back (a ``ROLLBACK`` leaves the session idle; a transaction a handler prepared is
rolled back too), and the caller runs the batch again the careful way (a savepoint per event,
every statement checked as it runs), which records which event failed and why. Either way a
domain change commits only together with its ``processed`` mark, and only while the row is
leased to us — except what a handler's own ``COMMIT`` committed before it was caught. A handler
may therefore run twice in one invocation (its first run rolled back), as it may on any
redelivery.

**The careful pass** (:func:`careful`): one transaction (``conn.transaction()``, inside the same
refusal of ``commit()``/``rollback()``), with the guard's savepoint per event: a failing event
rolls back to its savepoint and is marked ``failed`` (backoff with jitter) or ``dead_letter``
(permanent error, attempts spent); the others commit with their marks. A handler that ended
or rewound the transaction is dead-lettered alone (``transaction_control``) and the pass starts
again without it.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from webhook_inbox.backoff import backoff_delay
from webhook_inbox.errors import (
    EventError,
    LeaseLost,
    PermanentEventError,
    StoreError,
)
from webhook_inbox.processing import handler_guard, handlers
from webhook_inbox.processing.handler_guard import TransactionTaken
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store import db, inbox
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox.store.store_errors import translate

# Do not start another event's handler with less time than this left; its lease covers it.
STOP_MARGIN_MS = 2000
NO_HANDLER_DISPOSITION = "no handler registered for this provider and event type"


@dataclass(frozen=True)
class EventResult:
    """What happened to one leased event in this batch."""

    event: LeasedEvent
    outcome: str  # processed | failed | dead_letter | ignored | lease_lost | unfinished | deferred
    duration_ms: float = 0.0
    retry_delay_s: float | None = None
    latency: timedelta | None = None
    error_kind: str | None = None
    error: str | None = None  # describe_error's message: bounded, never payload text


@dataclass(frozen=True)
class FastPass:
    """The pass's verdict: ``results`` when it committed, None when it rolled everything back."""

    results: list[EventResult] | None
    reason: str = ""  # why it gave up (an error class name or "lease_lost"), never a message
    lease_lost: frozenset[int] = frozenset()  # rows another worker owns now: do not run again


def fast(
    conn: psycopg.Connection[Any],
    events: Sequence[LeasedEvent],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
) -> FastPass:
    """Process ``events`` in one pipelined transaction on an autocommit connection.

    Raises StoreError when the connection broke: then nothing of the batch committed, and the
    caller lets SQS redeliver it.
    """
    if not events:
        return FastPass([])
    if not conn.autocommit:
        conn.autocommit = True  # the pass's BEGIN must open its transaction, not psycopg's
    asked: psycopg.Cursor[Any] | None = None
    try:
        # The connection refuses a handler's commit() or rollback() in here (which would end the
        # batch's transaction under the later events): the handler raises, as in the careful pass.
        with translate(), db.handler_batch(conn, pipelined=True):
            handler_guard.begin_batch(conn)  # answered with the first wait
            asked = handler_guard.ask_batch_transaction(conn)  # read only on giving up
            results, marked = _run_all(conn, events, owner=owner, remaining_ms=remaining_ms)
            handler_guard.commit_batch(conn)
        # The pipeline's closing sync was the one wait for the guard's check, the marks and COMMIT.
    except Exception as exc:  # any failure, a handler's included: the batch goes the careful way
        if _connection_lost(conn):
            if isinstance(exc, StoreError):
                raise  # infrastructure: the whole batch is lost, SQS redelivers it
            raise StoreError("connection lost while giving up the fast pass") from exc
        lost = exc.rows if isinstance(exc, LeaseLost) else frozenset()
        reason = "lease_lost" if isinstance(exc, LeaseLost) else _reason(exc)
        _roll_back(conn)
        if asked is not None:
            handler_guard.settle_asked(conn, asked)
        return FastPass(None, reason, lost)
    except BaseException:
        with suppress(Exception):
            _roll_back(conn)  # leave no transaction open behind an interruption
        raise
    if marked is None:
        return FastPass(results)
    latency_of = inbox.batch_latencies(marked)
    # Built anew rather than by dataclasses.replace, which inspects the fields on every call
    # (1 % of the processor's client CPU): a processed result has its event and duration only.
    return FastPass(
        [
            EventResult(r.event, r.outcome, r.duration_ms, latency=latency_of[r.event.id])
            if r.outcome == "processed"
            else r
            for r in results
        ]
    )


def _reason(exc: Exception) -> str:
    """Why the pass gave up, for the log: an error class name, never a message."""
    return type(exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc).__name__


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End what is left of the pass's transaction (ROLLBACK unless the session is idle: a
    failed pipeline leaves it in error, a raising handler leaves it open)."""
    if not _connection_lost(conn):
        with translate():
            conn.rollback()


def _run_all(
    conn: psycopg.Connection[Any],
    events: Sequence[LeasedEvent],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
) -> tuple[list[EventResult], psycopg.Cursor[Any] | None]:
    """Run every handler, then send the guard's check and the batch's marks (none is waited
    for); returns the results and the marks' statement, to read after the sync."""
    results: list[EventResult] = []
    marks = handler_guard.PipelineMarks(conn)
    for event in events:
        if remaining_ms() < STOP_MARGIN_MS:
            results.append(EventResult(event, "unfinished"))
        else:
            results.append(_run_in_pipeline(conn, event, marks))
    marks.finish()  # the last handler's check travels with the batch's marks
    processed = [r.event.id for r in results if r.outcome == "processed"]
    ignored = [r.event.id for r in results if r.outcome == "ignored"]
    if not processed and not ignored:
        return results, None
    # Fails, and aborts the COMMIT behind it, unless every row is still leased to us (LeaseLost).
    marked = inbox.send_batch_marks(
        conn,
        processed=processed,
        ignored=ignored,
        owner=owner,
        disposition=NO_HANDLER_DISPOSITION,
    )
    return results, marked


def _run_in_pipeline(
    conn: psycopg.Connection[Any], event: LeasedEvent, marks: handler_guard.PipelineMarks
) -> EventResult:
    """The fast pass's run of one handler: nothing is checked or marked here (see _run_all)."""
    handler = handlers.handler_for(event.provider, event.event_type)
    if handler is None:
        return EventResult(event, "ignored")  # marked with the others in _run_all
    started = time.perf_counter()
    with translate():  # handlers may use the connection directly
        handler(conn, event)
        # Sent without waiting, and only after a handler that may have left a savepoint open:
        # its token, which a later handler's ROLLBACK TO that savepoint takes away. The check
        # after the last handler fails at the next wait.
        marks.after_handler(str(event.id))
    return EventResult(event, "processed", round((time.perf_counter() - started) * 1000, 3))


# --- the careful pass: one savepoint per event, every statement checked as it runs ----------

MAX_ERROR_CHARS = 500


def careful(
    conn: psycopg.Connection[Any],
    events: list[LeasedEvent],
    *,
    owner: str,
    remaining_ms: Callable[[], int],
    settings: ProcessorSettings,
) -> list[EventResult]:
    """One transaction, one savepoint per event, every statement checked as it runs.

    A handler that ends or rewinds the transaction (:mod:`webhook_inbox.processing.handler_guard`)
    is dead-lettered on its own, and the transaction abandoned; the events before it keep their
    outcomes if a COMMIT of the handler committed them, else they run again with the rest.
    Each such round removes one event, so the loop ends.
    """
    results: list[EventResult] = []
    pending = list(events)
    while pending:
        done: list[EventResult] = []
        xid = ""
        try:
            with translate(), db.handler_batch(conn), conn.transaction():
                xid = handler_guard.batch_transaction(conn)
                for event in pending:
                    if remaining_ms() < STOP_MARGIN_MS:
                        done.append(EventResult(event, "unfinished"))
                        continue
                    done.append(
                        _run_in_savepoint(conn, event, xid=xid, owner=owner, settings=settings)
                    )
            return results + done
        except TransactionTaken as taken:
            offender = pending[len(done)]
            if handler_guard.settle(conn, xid):  # the handler's COMMIT kept the ones before it
                results += done
                pending = pending[len(done) + 1 :]
            else:
                results += [r for r in done if r.outcome == "lease_lost"]
                rerun = {r.event.id for r in done if r.outcome != "lease_lost"}
                pending = [e for e in pending if e.id in rerun] + pending[len(done) + 1 :]
            results.append(_dead_letter(conn, offender, taken.error, owner=owner))
    return results


def _dead_letter(
    conn: psycopg.Connection[Any], event: LeasedEvent, error: EventError, *, owner: str
) -> EventResult:
    """Dead-letter a handler that took the transaction, in a statement of its own."""
    kind, message = describe_error(error)
    try:
        inbox.mark_dead_letter(conn, event.id, owner=owner, error_kind=kind, error=message)
    except LeaseLost:
        return EventResult(event, "lease_lost")
    return EventResult(event, "dead_letter", error_kind=kind)


def describe_error(exc: BaseException) -> tuple[str, str]:
    """Error kind and a bounded message that never carries payload text.

    Our own exceptions carry messages written for logs (StoreError messages hold only the
    driver's error class and SQLSTATE, or psycopg's own client-side words). Anything else may
    quote the payload (a KeyError names the missing key, a ValueError often repeats the input),
    so only its type and location are kept.
    """
    if isinstance(exc, EventError):
        return exc.kind, str(exc)[:MAX_ERROR_CHARS]
    if isinstance(exc, StoreError):
        return "store_error", str(exc)[:MAX_ERROR_CHARS]
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        where = (
            f" in {frames[-1].name} ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno})"
        )
    return "handler_error", f"{type(exc).__name__}{where}"[:MAX_ERROR_CHARS]


def _connection_lost(conn: psycopg.Connection[Any]) -> bool:
    return conn.closed or conn.broken


def _run_in_savepoint(
    conn: psycopg.Connection[Any],
    event: LeasedEvent,
    *,
    xid: str,
    owner: str,
    settings: ProcessorSettings,
) -> EventResult:
    """The careful pass's run of one handler in its savepoint, marked by its own statement."""
    started = time.perf_counter()

    def elapsed() -> float:
        return round((time.perf_counter() - started) * 1000, 3)

    handler = handlers.handler_for(event.provider, event.event_type)
    try:
        if handler is None:
            inbox.mark_ignored(conn, event.id, owner=owner, disposition=NO_HANDLER_DISPOSITION)
            return EventResult(event, "ignored", elapsed())
        try:
            # A savepoint: rolls back this event only. The check right after the handler
            # raises TransactionTaken before anything is marked in a transaction it ended.
            with handler_guard.guarded(conn, str(event.id), xid) as check:
                with translate():
                    handler(conn, event)
                check()
                latency = inbox.mark_processed(conn, event.id, owner=owner)
            return EventResult(event, "processed", elapsed(), latency=latency)
        except (LeaseLost, TransactionTaken):
            raise
        except StoreError as exc:
            if _connection_lost(conn):
                raise  # infrastructure: the whole batch is lost, SQS redelivers it
            failure: BaseException = exc  # a statement of this event failed; the batch goes on
        except Exception as exc:  # noqa: BLE001 - a handler bug must fail its own event only
            failure = exc
        failure = handler_guard.refused_call(failure) or failure  # commit() inside the batch
        return _record_failure(conn, event, failure, owner=owner, settings=settings, ms=elapsed())
    except LeaseLost:
        # Our lease expired and another worker took the row: its work, not ours, will count.
        return EventResult(event, "lease_lost", elapsed())


def _record_failure(
    conn: psycopg.Connection[Any],
    event: LeasedEvent,
    failure: BaseException,
    *,
    owner: str,
    settings: ProcessorSettings,
    ms: float,
) -> EventResult:
    kind, message = describe_error(failure)
    if isinstance(failure, PermanentEventError) or event.attempts >= settings.max_attempts:
        inbox.mark_dead_letter(conn, event.id, owner=owner, error_kind=kind, error=message)
        return EventResult(event, "dead_letter", ms, error_kind=kind, error=message)
    delay = backoff_delay(
        event.attempts,
        base_seconds=settings.retry_base_seconds,
        cap_seconds=settings.retry_max_seconds,
    )
    inbox.mark_failed(
        conn, event.id, owner=owner, delay_seconds=delay, error_kind=kind, error=message
    )
    return EventResult(event, "failed", ms, retry_delay_s=delay, error_kind=kind, error=message)
