"""The sweeper's run: its maintenance jobs, in this order, each in bounded batches inside the
Lambda's time budget (one module per job in :mod:`webhook_inbox.maintenance`):

1. lease expiry (:mod:`~webhook_inbox.maintenance.lease_expiry`): expired leases → failed (due
   now) or dead_letter;
2. re-enqueue and re-wake (:mod:`~webhook_inbox.maintenance.reenqueue`): received rows never
   enqueued and failed rows now due → the processing queue, ``{"id": <row id>}`` in
   SendMessageBatch calls of ten; rows sent over 8 minutes ago and still waiting → re-woken,
   oldest first, ``{"ids": [...]}`` with up to 25 rows per message;
3. the outbox (:mod:`~webhook_inbox.maintenance.outbox_publishing`) → EventBridge / SNS (see
   :mod:`webhook_inbox.outbox_drain`);
4. the backlog measurement the alarms watch (:mod:`~webhook_inbox.maintenance.backlog_measurement`);
5. retention (:mod:`~webhook_inbox.maintenance.retention`): payloads, then old keys and published
   outbox rows (``inbox.purge_payloads``, ``inbox.delete_expired_events``,
   ``outbox.delete_published``).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import Connection

from webhook_inbox import deadlines
from webhook_inbox.config import load, setting
from webhook_inbox.errors import ConfigurationError, StoreError
from webhook_inbox.maintenance.backlog_measurement import BacklogMeasurement
from webhook_inbox.maintenance.context import Step, SweepContext, TimeBudget
from webhook_inbox.maintenance.lease_expiry import LeaseExpiry
from webhook_inbox.maintenance.outbox_publishing import OutboxPublishing
from webhook_inbox.maintenance.reenqueue import Reenqueue
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.maintenance.retention import ExpiredRowDeletion, PayloadPurge
from webhook_inbox.publishers import Publisher
from webhook_inbox.store_errors import translate

# A database that stops answering is cut off this long before the invocation would end (never
# sooner than the minimum, even when the context reports no time left), as in the processor:
# time to drop the connection, report what was done and fail the invocation ourselves.
ANSWER_MARGIN_S = 1.0
MIN_DEADLINE_S = 1.0
DEADLINE_ERROR = "the database did not answer before the run's deadline"
# Stripe retries a failed delivery for up to three days: forgetting a key sooner would let a
# legitimate retry in as a new event.
MIN_KEY_RETENTION_DAYS = 3

# The steps of every run, in order (the module docstring's numbering). The backlog is measured
# before retention, so a retention problem never costs the alarms their data point.
STEPS: tuple[type[Step], ...] = (
    LeaseExpiry,
    Reenqueue,
    OutboxPublishing,
    BacklogMeasurement,
    PayloadPurge,
    ExpiredRowDeletion,
)


@dataclass(frozen=True)
class SweeperConfig:
    """The sweeper's settings: the first seven from the environment (:meth:`from_env`, once per
    execution environment), the rest tuning with fixed defaults."""

    queue_url: str = setting("PROCESSING_QUEUE_URL", "")
    max_attempts: int = setting("MAX_ATTEMPTS", 8)
    outbox_max_attempts: int = setting("OUTBOX_MAX_ATTEMPTS", 10)
    retry_base_seconds: float = setting("RETRY_BASE_SECONDS", 5.0)
    retry_max_seconds: float = setting("RETRY_MAX_SECONDS", 3600.0)
    payload_retention_days: int = setting("PAYLOAD_RETENTION_DAYS", 30)
    key_retention_days: int = setting("KEY_RETENTION_DAYS", 90)
    # Tuning, not configuration: sizes that keep each statement and transaction short.
    lease_batch: int = 500
    enqueue_batch: int = 100
    outbox_batch: int = 50
    retention_batch: int = 500
    # A row sent this long ago and still waiting may have lost its message - or may be waiting
    # in a long queue. Either way it is re-woken (and stamped again, so at most once per this
    # many seconds): a lost wake-up is re-sent within this plus one schedule period (1 min) of
    # its stamp, 9 minutes, under the 10 the design promises.
    reenqueue_stale_seconds: float = 480.0
    # Stale rows claimed per batch: one SendMessageBatch call of ten 25-row re-wakes.
    stale_batch: int = 250
    # At most this many re-wakes per run, so that a huge backlog leaves the run time for the
    # outbox and retention (docs/design.md: past this many stale rows a minute, the bound grows).
    stale_resend_cap: int = 25_000
    # Stop starting batches when less than this is left; the backlog measurement, one indexed
    # query, still runs down to the smaller reserve.
    safety_margin_ms: int = 10_000
    measure_reserve_ms: int = 5_000
    # An outbox lease outlives this run by this much, so a crashed run's messages come back soon.
    outbox_lease_margin_s: float = 30.0
    max_batches_per_step: int = 10_000

    def __post_init__(self) -> None:
        if not self.queue_url:
            raise ConfigurationError("PROCESSING_QUEUE_URL is not set")
        # A key retention shorter than the payload retention is allowed: deleting the row then
        # simply removes its payload earlier. One shorter than the providers' retry windows is
        # not (the template's MinValue refuses it at deploy time too).
        if self.key_retention_days < MIN_KEY_RETENTION_DAYS:
            raise ConfigurationError(
                f"KEY_RETENTION_DAYS must be at least {MIN_KEY_RETENTION_DAYS} "
                "(providers retry for days; an earlier key would accept a retry as new)"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SweeperConfig:
        return load(cls, environ)


class Sweep:
    """One sweeper run over one connection. Build a new one per invocation."""

    def __init__(
        self,
        conn: Connection[Any],
        config: SweeperConfig,
        *,
        sqs: Any,
        publisher: Publisher,
        remaining_ms: Callable[[], int],
        rng: random.Random | None = None,
    ) -> None:
        self.report = SweepReport()
        self._context = SweepContext(
            conn=conn,
            config=config,
            sqs=sqs,
            publisher=publisher,
            budget=TimeBudget(remaining_ms, margin_ms=config.safety_margin_ms),
            report=self.report,
            rng=rng,
        )

    def run(self) -> SweepReport:
        """Run the steps; a database failure (``StoreError``) ends the run and is re-raised.

        A database that accepts and never answers is bounded by nothing the server enforces:
        :func:`deadlines.deadline` cuts the connection shortly before the invocation would end,
        and the waiting statement fails like any other outage.
        """
        context = self._context
        started = time.monotonic()
        answer_within_s = max(
            context.budget.remaining_ms() / 1000 - ANSWER_MARGIN_S, MIN_DEADLINE_S
        )
        try:
            with deadlines.deadline(answer_within_s, context.conn) as cut, translate():
                # (translate: commits inside conn.transaction() raise driver errors too)
                for step in STEPS:
                    step(context).run()
        except StoreError:
            if cut.fired:
                self.report.stopped_early_at = context.step
                self.report.note_error(context.step, DEADLINE_ERROR)
            raise
        finally:
            self.report.duration_ms = int((time.monotonic() - started) * 1000)
        return self.report
