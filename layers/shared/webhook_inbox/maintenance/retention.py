"""Retention: terminal rows lose their payload first (``PAYLOAD_RETENTION_DAYS``), their row and
deduplication key later (``KEY_RETENTION_DAYS``), a whole day's partition at a time, inbox and
outbox alike.

Three steps, run in this order: the purge; the partitions' drop (inbox and outbox); what that
leaves, row by row: the rows stored before the switches to partitions, and the finished rows
of a day's partition that an unfinished row keeps (inbox: an event still owed processing or
replayed recently; outbox: a pending or dead message).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from webhook_inbox.errors import StoreLockTimeout
from webhook_inbox.maintenance.context import BatchedStep, SweepContext
from webhook_inbox.store import inbox_upkeep, outbox, partitions
from webhook_inbox.store.partitions import Partition


class PayloadPurge(BatchedStep):
    name = "purge_payloads"

    def batch(self) -> bool:
        conn, config = self.context.conn, self.context.config
        limit = config.retention_batch
        with conn.transaction():
            purged = inbox_upkeep.purge_payloads(
                conn, older_than_days=config.payload_retention_days, limit=limit
            )
        self.context.report.payloads_purged += purged
        return purged == limit


class ExpiredRowDeletion(BatchedStep):
    """Row by row, what retention by partition (the step before) leaves: inbox rows stored
    before the switch to partitions (ids below 2^32), whose old table retention cannot drop by
    day, and the finished rows of a day's partition that an unfinished or recently replayed
    event keeps; published outbox messages past the key retention in the outbox's old table,
    and in a day's partition that a pending or dead message keeps. Either table's statement
    leaves a day alone until its whole day is past the retention."""

    name = "delete_expired"

    def batch(self) -> bool:
        conn, config, report = self.context.conn, self.context.config, self.context.report
        limit = config.retention_batch
        days = config.key_retention_days
        with conn.transaction():
            events = inbox_upkeep.delete_expired_events(conn, older_than_days=days, limit=limit)
            if events:
                outbox.forget_source_event_ids(conn, events)
        with conn.transaction():
            messages = outbox.delete_published(conn, older_than_days=days, limit=limit)
        report.events_deleted += len(events)
        report.outbox_deleted += messages
        return limit in (len(events), messages)


class PartitionRetention(BatchedStep):
    """Rows past the key retention go a day's partition at a time, inbox then outbox: detached
    only when every row in it is finished (inbox: terminal and unchanged for the retention;
    outbox: published) and past the retention, their attempts and keys forgotten in batches,
    then dropped. A partition still holding an unfinished row stays, and is counted
    (``partitions_kept``): an event unfinished, or a message dead, after the whole key
    retention is a problem for an operator, not for retention. A run cut short leaves a
    detached table that the next run finishes."""

    name = "drop_partitions"

    def __init__(self, context: SweepContext) -> None:
        super().__init__(context)
        self._todo: list[Partition] | None = None

    def _candidates(self) -> list[Partition]:
        days = self.context.config.key_retention_days
        last_day = datetime.now(UTC).date() - timedelta(days=days + 1)
        return [
            p
            for table in partitions.TABLES
            for p in partitions.partitions(self.context.conn, table)
            if not p.attached or p.day is None or p.day <= last_day
        ]

    def batch(self) -> bool:
        conn, config, report = self.context.conn, self.context.config, self.context.report
        if self._todo is None:
            self._todo = self._candidates()
        if not self._todo:
            return False
        partition = self._todo[0]
        if partition.attached:
            try:
                kept = partitions.detach_if_expired(conn, partition, days=config.key_retention_days)
            except StoreLockTimeout:
                # Writers held the table longer than a claim would wait: the next run.
                table = partition.table
                report.note_error(self.name, f"the {table.noun} was busy; detach next run")
                self._todo = [p for p in self._todo if p.table != table]
                return bool(self._todo)
            if kept:
                if kept.unfinished and partition.day is not None:
                    report.partitions_kept += 1
                self._todo.pop(0)
            else:
                self._todo[0] = replace(partition, attached=False)
            return bool(self._todo)
        if self._retire(partition):
            self._todo.pop(0)
        return bool(self._todo)

    def _retire(self, partition: Partition) -> bool:
        """A batch of a detached partition's forgetting (the inbox's attempts, then keys); its
        drop once all is forgotten. Whether it is done with."""
        conn, report = self.context.conn, self.context.report
        if partition.table == partitions.INBOX:
            with conn.transaction():
                attempts = inbox_upkeep.forget_attempts(
                    conn, low=partition.low, high=partition.high, limit=partitions.KEY_BATCH
                )
            if attempts == partitions.KEY_BATCH:
                return False  # the keys after the attempts, next batch
        forgotten = partitions.forget_keys(conn, partition)
        if partition.table == partitions.INBOX:
            report.events_deleted += forgotten
        else:
            report.outbox_deleted += forgotten
        if forgotten == partitions.KEY_BATCH:
            return False
        if partitions.drop_detached(conn, partition):
            report.partitions_dropped += 1
        return True
