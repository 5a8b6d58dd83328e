"""Partitions ahead: the inbox has a partition for today and each of the next
``partitions_ahead_days`` days (:func:`webhook_inbox.store.partitions.create_ahead`), so a claim
never finds none for its id. First in every run, and cheap when they exist (one catalog read).

The first run of this release also makes the switch from the unpartitioned inbox
(:func:`~webhook_inbox.store.partitions.switch_to_partitions`, prepared online by migrations 0010
and 0011): one short transaction that waits at most the claim's lock wait; if the inbox is too
busy for that, the next run tries again and the table works unpartitioned meanwhile.
"""

from __future__ import annotations

from typing import ClassVar

from webhook_inbox.errors import StoreLockTimeout
from webhook_inbox.maintenance.context import SweepContext
from webhook_inbox.store import partitions


class PartitionUpkeep:
    name: ClassVar[str] = "partitions_ahead"

    def __init__(self, context: SweepContext) -> None:
        self.context = context

    def run(self) -> None:
        context, report = self.context, self.context.report
        context.step = self.name
        try:
            if partitions.switch_to_partitions(context.conn):
                report.partitions_switched = True
            report.partitions_created += partitions.create_ahead(
                context.conn, days=context.config.partitions_ahead_days
            )
        except StoreLockTimeout:
            # Writers held the inbox longer than a claim would wait: next run.
            report.note_error(self.name, "the inbox was busy; partitions not created this run")
            return
        report.completed_steps.append(self.name)
