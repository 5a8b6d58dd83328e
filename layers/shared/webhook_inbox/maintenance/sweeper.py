"""The sweeper's run: its maintenance jobs, in this order, each in bounded batches inside the
Lambda's time budget (one module per job in :mod:`webhook_inbox.maintenance`):

0. partitions ahead (:mod:`~webhook_inbox.maintenance.partition_upkeep`): the inbox's and the
   outbox's partitions for today and the next days;
1. lease expiry (:mod:`~webhook_inbox.maintenance.lease_expiry`): expired leases → failed (due
   now) or dead_letter;
   paused events (:mod:`~webhook_inbox.maintenance.circuit_probes`): rows of resumed pauses →
   due in arrival order; one held event per open circuit due a probe → due now;
2. re-enqueue and re-wake (:mod:`~webhook_inbox.maintenance.reenqueue`): received rows never
   enqueued and failed rows now due → the processing queue, ``{"id": <row id>}`` in
   SendMessageBatch calls of ten; rows sent over 8 minutes ago and still waiting → re-woken,
   oldest first, ``{"ids": [...]}`` with up to 25 rows per message;
3. the outbox (:mod:`~webhook_inbox.maintenance.outbox_publishing`) → EventBridge / SNS (see
   :mod:`webhook_inbox.maintenance.outbox_drain`);
4. the backlog measurement the alarms watch (:mod:`~webhook_inbox.maintenance.backlog_measurement`);
5. retention (:mod:`~webhook_inbox.maintenance.retention`): payloads, then whole inbox and
   outbox partitions past the key retention, then row by row what that leaves (the rows stored
   before the switches to partitions, published messages of a partition a dead one keeps)
   (``inbox_upkeep.purge_payloads``, ``partitions.detach_if_expired``,
   ``inbox_upkeep.delete_expired_events``, ``outbox.delete_published``);
6. until the inbox and the outbox are partitioned, their switches, a step at a time
   (:mod:`~webhook_inbox.maintenance.partition_upkeep`, ``partition_switch.advance_switch``);
7. a run that changed nothing asks when work next comes due, for the idle ledger
   (:mod:`~webhook_inbox.maintenance.idle`).

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
from collections.abc import Callable
from typing import Any

from psycopg import Connection

from webhook_inbox import deadlines
from webhook_inbox.errors import StoreError
from webhook_inbox.maintenance import idle
from webhook_inbox.maintenance.backlog_measurement import BacklogMeasurement
from webhook_inbox.maintenance.circuit_probes import PausedEvents
from webhook_inbox.maintenance.context import Step, SweepContext, TimeBudget
from webhook_inbox.maintenance.lease_expiry import LeaseExpiry
from webhook_inbox.maintenance.outbox_publishing import OutboxPublishing
from webhook_inbox.maintenance.partition_upkeep import PartitionSwitch, PartitionUpkeep
from webhook_inbox.maintenance.publishers import Publisher
from webhook_inbox.maintenance.reenqueue import Reenqueue
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.maintenance.retention import ExpiredRowDeletion, PartitionRetention, PayloadPurge
from webhook_inbox.settings import SweeperSettings
from webhook_inbox.store.store_errors import translate

# A database that stops answering is cut off this long before the invocation would end (never
# sooner than the minimum, even when the context reports no time left), as in the processor:
# time to drop the connection, report what was done and fail the invocation ourselves.
ANSWER_MARGIN_S = 1.0
MIN_DEADLINE_S = 1.0
DEADLINE_ERROR = "the database did not answer before the run's deadline"

# The steps of every run, in order (the module docstring's numbering). The backlog is measured
# before retention, so a retention problem never costs the alarms their data point.
STEPS: tuple[type[Step], ...] = (
    PartitionUpkeep,
    LeaseExpiry,
    PausedEvents,
    Reenqueue,
    OutboxPublishing,
    BacklogMeasurement,
    PayloadPurge,
    PartitionRetention,
    ExpiredRowDeletion,
    PartitionSwitch,
)


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
        self.report = SweepReport()
        # When a quiet run's database says work next comes due (maintenance/idle.py).
        self.next_due: float | None = None
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
                if context.config.idle_ledger_bucket and idle.was_quiet(self.report):
                    context.step = "next_due"
                    with context.conn.transaction():
                        self.next_due = idle.next_due(context.conn, context.config)
        except StoreError:
            if cut.fired:
                self.report.stopped_early_at = context.step
                self.report.note_error(context.step, DEADLINE_ERROR)
            raise
        finally:
            self.report.duration_ms = int((time.monotonic() - started) * 1000)
        return self.report
