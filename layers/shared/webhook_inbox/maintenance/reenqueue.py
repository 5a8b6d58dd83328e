"""Re-enqueue and re-wake: rows waiting for a wake-up get one.

``received`` rows never enqueued and ``failed`` rows now due are sent to the processing queue,
``{"id": <row id>}`` in SendMessageBatch calls of ten. Rows sent over ``reenqueue_stale_seconds``
ago and still waiting may have lost their message: they are re-woken, oldest first, ``{"ids":
[...]}`` with up to 25 rows per message, at most ``stale_resend_cap`` rows per run.
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook_inbox import aws
from webhook_inbox.maintenance.context import BatchedStep, SweepContext
from webhook_inbox.maintenance.publishers import aws_error_text
from webhook_inbox.store import inbox, inbox_upkeep


class Reenqueue(BatchedStep):
    name = "reenqueue"

    def __init__(self, context: SweepContext) -> None:
        super().__init__(context)
        self._sqs_down = False  # a whole SendMessageBatch call failed: stop sending this run
        self._stale_left = context.config.stale_resend_cap  # re-wakes this run may still send

    def batch(self) -> bool:
        conn, config, report = self.context.conn, self.context.config, self.context.report
        # Claimed by stamping enqueued_at, and committed, before sending: an overlapping sweeper
        # skips the stamped rows, and no row lock is held while SQS hands a message to a
        # processor (whose lease would skip a locked row). A crash before the send leaves a
        # stamp that the stale rule re-sends later.
        stale_limit = min(config.stale_batch, self._stale_left)
        with conn.transaction():
            rows = inbox_upkeep.claim_due_for_enqueue(
                conn,
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
            with conn.transaction():
                # Never-sent rows lose their stamp and stay due; stale ones stay stale, so the
                # next run re-wakes them packed rather than one message each.
                if unsent:
                    inbox.clear_enqueued(conn, unsent)
                if not_rewoken:
                    inbox_upkeep.backdate_enqueued(
                        conn, not_rewoken, stale_seconds=config.reenqueue_stale_seconds
                    )
        report.reenqueued += len(sent)
        report.rewoken += len(rewoken)
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
        report = self.context.report
        result = aws.send_wakeups(
            self.context.sqs,
            self.context.config.queue_url,
            ids,
            keep_going=self.context.has_time_for_another_call,
            stop_after_failure=True,  # SQS is unreachable or refusing: the rows stay due
            rewake=rewake,
        )
        if result.errors:
            self._sqs_down = True  # for the rest of this run
            report.enqueue_failed += len(result.failed)
            for exc in result.errors:
                report.note_error(self.name, aws_error_text(exc))
        # A rejected entry (SQS-side, per entry) does not stop the others.
        for _, code in result.rejected:
            report.enqueue_failed += 1
            report.note_error(self.name, code)
        return result.sent, result.unsent
