"""Paused events: a circuit not yet open whose key stayed quiet for its window is resumed, the
rows resumed pauses still hold go back to due, in arrival order, and each open circuit due a
probe lets one held event through (:mod:`webhook_inbox.processing.circuits`).

Before the re-enqueue step, which sends both in the same run: released rows are due at their
arrival time (oldest first, at the step's usual batch rate), a probe is due now. A circuit's next
probe waits twice as long as the last, up to ``CIRCUIT_MAX_COOLDOWN_SECONDS``.
"""

from __future__ import annotations

from webhook_inbox.maintenance.context import BatchedStep
from webhook_inbox.store import pauses


class PausedEvents(BatchedStep):
    name = "paused_events"

    def batch(self) -> bool:
        conn, config, report = self.context.conn, self.context.config, self.context.report
        with conn.transaction():
            pauses.expire_quiet_circuits(conn, window_seconds=config.circuit_window_seconds)
        with conn.transaction():  # one release batch per transaction: the step loop keeps time
            released = pauses.release_resumed(conn, batch=config.enqueue_batch)
        report.held_released += released
        if released == config.enqueue_batch:
            return True
        with conn.transaction():
            report.probes_sent += pauses.send_probes(
                conn,
                limit=config.enqueue_batch,
                max_cooldown_seconds=config.circuit_max_cooldown_seconds,
            )
        return False
