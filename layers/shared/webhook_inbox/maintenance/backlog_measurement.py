"""The backlog measurement: the numbers the alarms watch
(:mod:`webhook_inbox.store.backlog_metrics`).

One indexed query, not batched: it runs if the smaller ``measure_reserve_ms`` is left, using part
of the safety margin the batched steps keep, so a run short of time still gives the alarms their
data point. A run with no time for it reports no backlog, which the alarms see as missing data.
"""

from __future__ import annotations

import time
from typing import ClassVar

from webhook_inbox.maintenance.context import SweepContext
from webhook_inbox.store import backlog_metrics


class BacklogMeasurement:
    name: ClassVar[str] = "backlog"

    def __init__(self, context: SweepContext) -> None:
        self.context = context

    def run(self) -> None:
        context = self.context
        if context.budget.allows(reserve_ms=context.config.measure_reserve_ms):
            context.step = self.name
            with context.conn.transaction():
                context.report.backlog = backlog_metrics.measure(context.conn)
            context.report.backlog_measured_at = time.time()
