"""The outbox step: pending messages → EventBridge / SNS, batch by batch
(:func:`webhook_inbox.maintenance.outbox_drain.drain_batch` claims, publishes and records each
batch).

Its claims are leased for the run's remaining time plus a margin, so a crashed run's messages
come back soon after it would have ended, and never while it may still publish them.

The step reads the oldest pending message's id once and claims from it on: each claim then
plans only the days from that one on, not the whole history kept. A message made pending again
meanwhile with an older id (an operator's ``outbox retry``) goes on the next run.
"""

from __future__ import annotations

from webhook_inbox.maintenance.context import BatchedStep, SweepContext
from webhook_inbox.maintenance.outbox_drain import RetryPolicy, drain_batch
from webhook_inbox.store import outbox


class OutboxPublishing(BatchedStep):
    name = "outbox"

    def __init__(self, context: SweepContext) -> None:
        super().__init__(context)
        self._from_id: int | None = None

    def batch(self) -> bool:
        context, config, report = self.context, self.context.config, self.context.report
        if self._from_id is None:
            with context.conn.transaction():
                self._from_id = outbox.oldest_pending_message(context.conn)
            if self._from_id is None:
                return False  # nothing owed; what the processor adds meanwhile, next run
        lease_seconds = max(
            config.outbox_lease_margin_s,
            context.budget.remaining_ms() / 1000 + config.outbox_lease_margin_s,
        )
        outcome = drain_batch(
            context.conn,
            context.publisher,
            limit=config.outbox_batch,
            lease_seconds=lease_seconds,
            from_id=self._from_id,
            policy=RetryPolicy(
                max_attempts=config.outbox_max_attempts,
                base_seconds=config.retry_base_seconds,
                cap_seconds=config.retry_max_seconds,
            ),
            keep_going=context.has_time_for_another_call,
            rng=context.rng,
        )
        report.outbox_published += outcome.published
        report.outbox_retried += outcome.retried
        report.outbox_dead += outcome.dead
        report.outbox_released += outcome.not_attempted
        for error in outcome.errors:
            report.note_error(self.name, error)
        # Failed messages are not due again before their backoff, so they cannot loop here.
        return outcome.claimed == config.outbox_batch and outcome.not_attempted == 0
