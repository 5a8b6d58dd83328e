"""The partitions of the inbox and the outbox, at both ends of a run.

First (:class:`PartitionUpkeep`): each partitioned table has a partition for today and each of
the next ``partitions_ahead_days`` days (:func:`webhook_inbox.store.partitions.create_ahead`),
so a claim or an outbox message never finds none for its id. First because a missing partition
stops ingest (or the processor's batch), and cheap when they exist (one catalog read a table).

Last (:class:`PartitionSwitch`): until both tables are partitioned, the run spends what time it
has left on the switches from the unpartitioned tables, the inbox's then the outbox's, one step
at a time (:func:`~webhook_inbox.store.partition_switch.advance_switch`): the steps that lock a
table wait at most the claim's lock wait, and a busy table is tried again on the next run; the
table works unpartitioned meanwhile. Each switch itself waits until the table's migration has
been applied for a day (``partition_switch.RELEASE_SETTLE_HOURS``): the release before's claim
and outbox insert fail on a partitioned table, and that release runs on through a gradual
deploy or comes back with a rollback. Last because it is the only long work here (filling keys,
one scan).
"""

from __future__ import annotations

import time
from typing import ClassVar

from webhook_inbox.errors import StoreLockTimeout, StoreStatementTimeout
from webhook_inbox.maintenance.context import SweepContext
from webhook_inbox.store import partition_switch, partitions


class PartitionUpkeep:
    name: ClassVar[str] = "partitions_ahead"

    def __init__(self, context: SweepContext) -> None:
        self.context = context

    def run(self) -> None:
        context, report = self.context, self.context.report
        if not context.budget.allows():
            report.stopped_early_at = report.stopped_early_at or self.name
            return
        context.step = self.name
        for table in partitions.TABLES:
            try:
                if partitions.is_partitioned(context.conn, table):
                    report.partitions_created += partitions.create_ahead(
                        context.conn, days=context.config.partitions_ahead_days, table=table
                    )
            except StoreLockTimeout:
                # Writers held the table longer than a claim would wait: next run.
                report.note_error(
                    self.name, f"the {table.noun} was busy; partitions not created this run"
                )
                return
        report.completed_steps.append(self.name)


class PartitionSwitch:
    name: ClassVar[str] = "partition_switch"

    def __init__(self, context: SweepContext) -> None:
        self.context = context

    def run(self) -> None:
        context, report = self.context, self.context.report
        longest_ms = 0.0
        context.step = self.name
        tables = list(partitions.TABLES)
        for _ in range(context.config.max_batches_per_step):
            if not context.budget.allows(longest_ms):
                report.stopped_early_at = report.stopped_early_at or self.name
                return
            table = tables[0]
            started = time.monotonic()
            budget = context.budget
            try:
                # The scan that validates the old table's range may use what is left.
                left_ms = max(budget.remaining_ms() - budget.margin_ms, 1)
                step = partition_switch.advance_switch(
                    context.conn, table, validate_timeout_ms=left_ms
                )
            except StoreLockTimeout:
                report.note_error(
                    self.name, f"the {table.noun} was busy; the switch goes on next run"
                )
                return
            except StoreStatementTimeout:
                # The old table is too large to scan in what was left of this run: the next run
                # starts the scan over (docs/design.md says how to run it once by hand).
                report.note_error(
                    self.name, f"the {table.noun}'s range check scan did not finish in this run"
                )
                return
            longest_ms = max(longest_ms, (time.monotonic() - started) * 1000)
            if step == partition_switch.WAIT_FOR_RELEASE:
                # Only the switch is left, and the release before may still run: a later run
                # (the outbox's switch comes after the inbox's, so it waits too).
                report.completed_steps.append(self.name)
                return
            if step == "switch":
                report.partitions_switched = True
            if step is None or step == "switch":
                tables.pop(0)  # this table is partitioned: the next one's switch
                if not tables:
                    report.completed_steps.append(self.name)
                    return
        report.stopped_early_at = report.stopped_early_at or self.name
