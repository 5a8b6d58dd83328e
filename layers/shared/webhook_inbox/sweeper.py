"""The sweeper's run: five steps in bounded batches, inside the Lambda's time budget.

1. expired leases → failed (due now) or dead_letter;
2. received rows never enqueued and failed rows now due → the processing queue, ``{"id": <row
   id>}`` in SendMessageBatch calls of ten; rows sent over 8 minutes ago and still waiting →
   re-woken, oldest first, ``{"ids": [...]}`` with up to 25 rows per message;
3. the outbox → EventBridge / SNS (see :mod:`webhook_inbox.outbox_drain`);
4. the backlog measurements the alarms watch (:mod:`webhook_inbox.backlog`);
5. retention: payloads, then old keys and published outbox rows (``inbox.purge_payloads``,
   ``inbox.delete_expired_events``, ``outbox.delete_published``).

Overlapping runs are safe: every step picks its rows with ``FOR UPDATE SKIP LOCKED``; step 2
stamps ``enqueued_at`` on its rows and commits before it sends (no lock held while a processor
receives the message), step 3 holds a time lease while it publishes. Before every batch the run
checks the Lambda's remaining time and stops while a safety margin is left; what it leaves, the
next run (a minute later) picks up. A database that stops answering is cut off a second before
the invocation would end (``deadlines.deadline``): the run fails like any database failure.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from psycopg import Connection

from webhook_inbox import aws, backlog, deadlines, inbox, outbox
from webhook_inbox.backlog import Backlog
from webhook_inbox.errors import StoreError
from webhook_inbox.outbox_drain import RetryPolicy, drain_batch
from webhook_inbox.publishers import Publisher, aws_error_text
from webhook_inbox.settings import SweeperSettings
from webhook_inbox.store_errors import translate

MAX_REPORTED_ERRORS = 5
# A database that stops answering is cut off this long before the invocation would end (never
# sooner than the minimum, even when the context reports no time left), as in the processor:
# time to drop the connection, report what was done and fail the invocation ourselves.
ANSWER_MARGIN_S = 1.0
MIN_DEADLINE_S = 1.0
DEADLINE_ERROR = "the database did not answer before the run's deadline"


class Budget:
    """The Lambda's remaining time, asked before every batch."""

    def __init__(self, remaining_ms: Callable[[], int], *, margin_ms: int) -> None:
        self._remaining_ms = remaining_ms
        self.margin_ms = margin_ms

    def remaining_ms(self) -> int:
        return self._remaining_ms()

    def allows(self, estimate_ms: float = 0.0, *, reserve_ms: int | None = None) -> bool:
        """Whether a batch expected to take ``estimate_ms`` ends before the reserve is reached."""
        reserve = self.margin_ms if reserve_ms is None else reserve_ms
        return self._remaining_ms() - estimate_ms >= reserve


@dataclass
class SweepReport:
    leases_expired: int = 0
    leases_dead_lettered: int = 0
    reenqueued: int = 0
    rewoken: int = 0  # stale rows re-woken (packed, up to 25 per message)
    enqueue_failed: int = 0
    outbox_published: int = 0
    outbox_retried: int = 0
    outbox_dead: int = 0
    outbox_released: int = 0
    payloads_purged: int = 0
    events_deleted: int = 0
    outbox_deleted: int = 0
    completed_steps: list[str] = field(default_factory=list)
    # The first step that ran out of time (None: every step finished its work).
    stopped_early_at: str | None = None
    backlog: Backlog | None = None
    duration_ms: int = 0
    # A few distinct AWS error texts (codes and AWS's messages; never ids or payloads).
    errors: list[str] = field(default_factory=list)

    def note_error(self, step: str, text: str) -> None:
        entry = f"{step}: {text}"[:300]
        if entry not in self.errors and len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(entry)

    def as_log(self) -> dict[str, Any]:
        """The one summary log line: counts and step names only, never ids or payloads."""
        fields = asdict(self)
        fields["backlog"] = asdict(self.backlog) if self.backlog else None
        return fields


class Sweep:
    """One sweeper run over one connection. Build a new one per invocation."""

    def __init__(
        self,
        conn: Connection[Any],
        config: SweeperSettings,
        *,
        sqs: Any,
        publisher: Publisher,
        remaining_ms: Callable[[], int],
        rng: random.Random | None = None,
    ) -> None:
        self._conn = conn
        self._config = config
        self._sqs = sqs
        self._publisher = publisher
        self._budget = Budget(remaining_ms, margin_ms=config.safety_margin_ms)
        self._rng = rng
        self._sqs_down = False  # a whole SendMessageBatch call failed: stop sending this run
        self._cut_short = False  # the current batch stopped part-way because time ran out
        self._stale_left = config.stale_resend_cap  # re-wakes this run may still send
        self._step = ""  # the step running, for the report of a run cut short
        self.report = SweepReport()

    def run(self) -> SweepReport:
        """Run the steps; a database failure (``StoreError``) ends the run and is re-raised.

        A database that accepts and never answers is bounded by nothing the server enforces:
        :func:`deadlines.deadline` cuts the connection shortly before the invocation would end,
        and the waiting statement fails like any other outage.
        """
        started = time.monotonic()
        answer_within_s = max(self._budget.remaining_ms() / 1000 - ANSWER_MARGIN_S, MIN_DEADLINE_S)
        try:
            with deadlines.deadline(answer_within_s, self._conn) as cut, translate():
                # (translate: commits inside conn.transaction() raise driver errors too)
                self._loop("expire_leases", self._expire_leases_batch)
                self._loop("reenqueue", self._reenqueue_batch)
                self._loop("outbox", self._outbox_batch)
                # Measured before retention, so a retention problem never costs the alarms
                # their data point; the measurement may use part of the safety margin.
                if self._budget.allows(reserve_ms=self._config.measure_reserve_ms):
                    self._step = "backlog"
                    with self._conn.transaction():
                        self.report.backlog = backlog.measure(self._conn)
                self._loop("purge_payloads", self._purge_batch)
                self._loop("delete_expired", self._delete_batch)
        except StoreError:
            if cut.fired:
                self.report.stopped_early_at = self._step
                self.report.note_error(self._step, DEADLINE_ERROR)
            raise
        finally:
            self.report.duration_ms = int((time.monotonic() - started) * 1000)
        return self.report

    def _loop(self, step: str, batch: Callable[[], bool]) -> None:
        """Run ``batch`` until it reports no more work, the time budget ends, or the count cap."""
        longest_ms = 0.0
        self._step = step
        for _ in range(self._config.max_batches_per_step):
            if not self._budget.allows(longest_ms):
                break
            self._cut_short = False
            started = time.monotonic()
            more = batch()
            longest_ms = max(longest_ms, (time.monotonic() - started) * 1000)
            if self._cut_short:
                break
            if not more:
                self.report.completed_steps.append(step)
                return
        self.report.stopped_early_at = self.report.stopped_early_at or step

    def _time_left(self) -> bool:
        """Checked inside a batch, between AWS calls; remembers when the answer was no."""
        if self._budget.allows():
            return True
        self._cut_short = True
        return False

    # --- 1. expired leases -------------------------------------------------------------------

    def _expire_leases_batch(self) -> bool:
        limit = self._config.lease_batch
        with self._conn.transaction():
            expired = inbox.expire_leases(
                self._conn, max_attempts=self._config.max_attempts, limit=limit
            )
        self.report.leases_expired += len(expired)
        self.report.leases_dead_lettered += sum(1 for _, s in expired if s == "dead_letter")
        return len(expired) == limit

    # --- 2. re-enqueue -----------------------------------------------------------------------

    def _reenqueue_batch(self) -> bool:
        config = self._config
        # Claimed by stamping enqueued_at, and committed, before sending: an overlapping sweeper
        # skips the stamped rows, and no row lock is held while SQS hands a message to a
        # processor (whose lease would skip a locked row). A crash before the send leaves a
        # stamp that the stale rule re-sends later.
        stale_limit = min(config.stale_batch, self._stale_left)
        with self._conn.transaction():
            rows = inbox.claim_due_for_enqueue(
                self._conn,
                limit=config.enqueue_batch,
                stale_seconds=config.reenqueue_stale_seconds,
                stale_limit=stale_limit,
            )
        never_sent = [row_id for row_id, _, stale in rows if not stale]
        stale = [row_id for row_id, _, stale in rows if stale]
        self._stale_left -= len(stale)
        sent, unsent = self._send(never_sent)
        rewoken, not_rewoken = self._send(stale, rewake=True)
        if unsent or not_rewoken:
            with self._conn.transaction():
                # Never-sent rows lose their stamp and stay due; stale ones stay stale, so the
                # next run re-wakes them packed rather than one message each.
                if unsent:
                    inbox.clear_enqueued(self._conn, unsent)
                if not_rewoken:
                    inbox.backdate_enqueued(
                        self._conn, not_rewoken, stale_seconds=config.reenqueue_stale_seconds
                    )
        self.report.reenqueued += len(sent)
        self.report.rewoken += len(rewoken)
        # A full claim that sent something means more may be waiting; one that sent nothing
        # means SQS is refusing (or time is up), and looping would only pick the same rows again.
        full = len(never_sent) == config.enqueue_batch or (
            stale_limit and len(stale) == stale_limit
        )
        return bool(full) and bool(sent or rewoken) and not self._sqs_down

    def _send(self, ids: Sequence[int], *, rewake: bool = False) -> tuple[list[int], list[int]]:
        if not ids:
            return [], []
        if self._sqs_down:
            return [], list(ids)
        result = aws.send_wakeups(
            self._sqs,
            self._config.queue_url,
            ids,
            keep_going=self._time_left,
            stop_after_failure=True,  # SQS is unreachable or refusing: the rows stay due
            rewake=rewake,
        )
        if result.errors:
            self._sqs_down = True  # for the rest of this run
            self.report.enqueue_failed += len(result.failed)
            for exc in result.errors:
                self.report.note_error("reenqueue", aws_error_text(exc))
        # A rejected entry (SQS-side, per entry) does not stop the others.
        for _, code in result.rejected:
            self.report.enqueue_failed += 1
            self.report.note_error("reenqueue", code)
        return result.sent, result.unsent

    # --- 3. outbox ---------------------------------------------------------------------------

    def _outbox_batch(self) -> bool:
        config = self._config
        lease_seconds = max(
            config.outbox_lease_margin_s,
            self._budget.remaining_ms() / 1000 + config.outbox_lease_margin_s,
        )
        outcome = drain_batch(
            self._conn,
            self._publisher,
            limit=config.outbox_batch,
            lease_seconds=lease_seconds,
            policy=RetryPolicy(
                max_attempts=config.outbox_max_attempts,
                base_seconds=config.retry_base_seconds,
                cap_seconds=config.retry_max_seconds,
            ),
            keep_going=self._time_left,
            rng=self._rng,
        )
        self.report.outbox_published += outcome.published
        self.report.outbox_retried += outcome.retried
        self.report.outbox_dead += outcome.dead
        self.report.outbox_released += outcome.not_attempted
        for error in outcome.errors:
            self.report.note_error("outbox", error)
        # Failed messages are not due again before their backoff, so they cannot loop here.
        return outcome.claimed == config.outbox_batch and outcome.not_attempted == 0

    # --- 4. retention ------------------------------------------------------------------------

    def _purge_batch(self) -> bool:
        limit = self._config.retention_batch
        with self._conn.transaction():
            purged = inbox.purge_payloads(
                self._conn, older_than_days=self._config.payload_retention_days, limit=limit
            )
        self.report.payloads_purged += purged
        return purged == limit

    def _delete_batch(self) -> bool:
        limit = self._config.retention_batch
        days = self._config.key_retention_days
        with self._conn.transaction():
            events = inbox.delete_expired_events(self._conn, older_than_days=days, limit=limit)
        with self._conn.transaction():
            messages = outbox.delete_published(self._conn, older_than_days=days, limit=limit)
        self.report.events_deleted += events
        self.report.outbox_deleted += messages
        return limit in (events, messages)


# --- metrics -------------------------------------------------------------------------------


def emit_metrics(report: SweepReport, metrics: Any) -> None:
    """Add the run's non-zero counters and gauges to ``metrics`` (Powertools Metrics) and flush
    the dimensioned ones. Dimensions stay bounded: only ``status`` beside ``service``.

    Zeros are left out: CloudWatch bills a custom metric for every hour it receives a value, so
    an idle stack publishing fourteen zeros a minute paid $4.20 a month for them. Every alarm on
    these metrics treats missing data as not breaching, and a graph shows a gap for zero.
    """
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    count, seconds = MetricUnit.Count, MetricUnit.Seconds
    values: list[tuple[str, MetricUnit, float]] = [
        ("LeasesExpired", count, report.leases_expired),
        ("DeadLettered", count, report.leases_dead_lettered),
        # Rows sent to the queue, first sends and re-wakes alike (the log line tells them apart).
        ("Reenqueued", count, report.reenqueued + report.rewoken),
        ("EnqueueFailed", count, report.enqueue_failed),
        ("OutboxPublished", count, report.outbox_published),
        ("OutboxFailed", count, report.outbox_retried),
        ("OutboxDead", count, report.outbox_dead),
    ]
    measured = report.backlog  # None: no time was left to measure; alarms see it as missing
    if measured is not None:
        values += [
            ("OldestUnprocessedAgeSeconds", seconds, measured.oldest_unprocessed_age_seconds),
            ("OldestOutboxAgeSeconds", seconds, measured.oldest_outbox_age_seconds),
            ("DeadLetteredEvents", count, measured.dead_lettered_events),
        ]
    for name, unit, value in values:
        if value:
            metrics.add_metric(name=name, unit=unit, value=value)
    # One EMF document per status: a dimension applies to every metric in its document.
    for status, value in measured.event_counts.items() if measured is not None else ():
        if value:
            with single_metric(
                name="BacklogCount",
                unit=count,
                value=value,
                namespace=metrics.namespace,
                default_dimensions={"status": status},
            ):
                pass
