"""Lease expiry: ``processing`` rows whose lease ran out (the worker died or timed out) become
``failed`` and due at once, or ``dead_letter`` once their attempts are spent.

First, so that the re-enqueue step that follows sends these rows in the same run.
"""

from __future__ import annotations

from webhook_inbox.maintenance.context import BatchedStep
from webhook_inbox.store import inbox_upkeep


class LeaseExpiry(BatchedStep):
    name = "expire_leases"

    def batch(self) -> bool:
        conn, config, report = self.context.conn, self.context.config, self.context.report
        limit = config.lease_batch
        with conn.transaction():
            expired = inbox_upkeep.expire_leases(
                conn, max_attempts=config.max_attempts, limit=limit
            )
        report.leases_expired += len(expired)
        report.leases_dead_lettered += sum(1 for _, s in expired if s == "dead_letter")
        return len(expired) == limit
