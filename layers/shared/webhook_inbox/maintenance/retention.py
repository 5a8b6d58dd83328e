"""Retention: terminal rows lose their payload first (``PAYLOAD_RETENTION_DAYS``), their row and
deduplication key later (``KEY_RETENTION_DAYS``), with the published outbox messages of that age.

Two steps, run in this order: the purge, then the deletion.
"""

from __future__ import annotations

from webhook_inbox.maintenance.context import BatchedStep
from webhook_inbox.store import inbox, outbox


class PayloadPurge(BatchedStep):
    name = "purge_payloads"

    def batch(self) -> bool:
        conn, config = self.context.conn, self.context.config
        limit = config.retention_batch
        with conn.transaction():
            purged = inbox.purge_payloads(
                conn, older_than_days=config.payload_retention_days, limit=limit
            )
        self.context.report.payloads_purged += purged
        return purged == limit


class ExpiredRowDeletion(BatchedStep):
    name = "delete_expired"

    def batch(self) -> bool:
        conn, config, report = self.context.conn, self.context.config, self.context.report
        limit = config.retention_batch
        days = config.key_retention_days
        with conn.transaction():
            events = inbox.delete_expired_events(conn, older_than_days=days, limit=limit)
        with conn.transaction():
            messages = outbox.delete_published(conn, older_than_days=days, limit=limit)
        report.events_deleted += events
        report.outbox_deleted += messages
        return limit in (events, messages)
