"""The inbox's partitions, at both ends of a run.

First (:class:`PartitionUpkeep`): the inbox has a partition for today and each of the next
``partitions_ahead_days`` days (:func:`webhook_inbox.store.partitions.create_ahead`), so a claim
never finds none for its id. First because a missing partition stops ingest, and cheap when they
exist (one catalog read).

Last (:class:`PartitionSwitch`): until the inbox is partitioned, the run spends what time it has
left on the switch from the unpartitioned table, one step at a time
(:func:`~webhook_inbox.store.partitions.advance_switch`): the steps that lock the inbox wait at
most the claim's lock wait, and a busy inbox is tried again on the next run; the table works
unpartitioned meanwhile. The switch itself waits until migration 0010 has been applied for a
day (``partitions.RELEASE_SETTLE_HOURS``): the release before's claim fails on a partitioned
table, and that release runs on through a gradual deploy or comes back with a rollback. Last
because it is the only long work here (filling keys, one scan).
"""

from __future__ import annotations

import time
from typing import ClassVar

from webhook_inbox.errors import StoreLockTimeout, StoreStatementTimeout
from webhook_inbox.maintenance.context import SweepContext
from webhook_inbox.store import partitions


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
        try:
            if partitions.is_partitioned(context.conn):
                report.partitions_created += partitions.create_ahead(
                    context.conn, days=context.config.partitions_ahead_days
                )
        except StoreLockTimeout:
            # Writers held the inbox longer than a claim would wait: next run.
            report.note_error(self.name, "the inbox was busy; partitions not created this run")
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
        for _ in range(context.config.max_batches_per_step):
            if not context.budget.allows(longest_ms):
                report.stopped_early_at = report.stopped_early_at or self.name
                return
            started = time.monotonic()
            budget = context.budget
            try:
                # The scan that validates the old table's range may use what is left.
                left_ms = max(budget.remaining_ms() - budget.margin_ms, 1)
                step = partitions.advance_switch(context.conn, validate_timeout_ms=left_ms)
            except StoreLockTimeout:
                report.note_error(self.name, "the inbox was busy; the switch goes on next run")
                return
            except StoreStatementTimeout:
                # The old table is too large to scan in what was left of this run: the next run
                # starts the scan over (docs/design.md says how to run it once by hand).
                report.note_error(self.name, "the range check's scan did not finish in this run")
                return
            longest_ms = max(longest_ms, (time.monotonic() - started) * 1000)
            # Done for this run: the inbox is partitioned, was switched now, or only the switch
            # is left and waits for the release before to be gone for good.
            if step in (None, "switch", partitions.WAIT_FOR_RELEASE):
                report.partitions_switched = step == "switch"
                report.completed_steps.append(self.name)
                return
        report.stopped_early_at = report.stopped_early_at or self.name
