"""What every maintenance step is given (the run's :class:`SweepContext`), and how a batched step
spends the run's time (:class:`BatchedStep`).

One place for the time rules, so that every step stops the same way: before each batch, while a
safety margin is left, judged by the step's slowest batch so far; and inside a batch, between AWS
calls.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from psycopg import Connection

from webhook_inbox.maintenance.publishers import Publisher
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.settings import SweeperSettings


class TimeBudget:
    """The Lambda's remaining time, asked before every batch."""

    def __init__(self, remaining_ms: Callable[[], int], *, margin_ms: int) -> None:
        self._remaining_ms = remaining_ms
        self.margin_ms = margin_ms

    def remaining_ms(self) -> int:
        return self._remaining_ms()

    def allows(self, estimate_ms: float = 0.0, *, reserve_ms: int | None = None) -> bool:
        """Whether a batch expected to take ``estimate_ms`` ends before the reserve is reached."""
        reserve = self.margin_ms if reserve_ms is None else reserve_ms
        return self._remaining_ms() - estimate_ms >= reserve


@dataclass
class SweepContext:
    """One run's connection, settings, clients, time and report, shared by its steps."""

    conn: Connection[Any]
    config: SweeperSettings
    sqs: Any
    publisher: Publisher
    budget: TimeBudget
    report: SweepReport
    rng: random.Random | None = None
    step: str = ""  # the step running, for the report of a run cut short
    cut_short: bool = False  # the current batch stopped part-way because time ran out

    def has_time_for_another_call(self) -> bool:
        """Asked inside a batch, before each AWS call; remembers when the answer was no."""
        if self.budget.allows():
            return True
        self.cut_short = True
        return False


class Step(Protocol):
    """One maintenance job, built for one run."""

    name: ClassVar[str]

    def __init__(self, context: SweepContext) -> None: ...

    def run(self) -> None: ...


class BatchedStep(ABC):
    """A job done in bounded batches, each in short transactions; its name is reported in
    ``completed_steps`` once a batch finds no more work."""

    name: ClassVar[str]

    def __init__(self, context: SweepContext) -> None:
        self.context = context

    @abstractmethod
    def batch(self) -> bool:
        """Do one batch; whether more work may be waiting."""

    def run(self) -> None:
        """Run batches until one reports no more work, the time budget ends, or the count cap."""
        context, report = self.context, self.context.report
        longest_ms = 0.0
        context.step = self.name
        for _ in range(context.config.max_batches_per_step):
            if not context.budget.allows(longest_ms):
                break
            context.cut_short = False
            started = time.monotonic()
            more = self.batch()
            longest_ms = max(longest_ms, (time.monotonic() - started) * 1000)
            if context.cut_short:
                break
            if not more:
                report.completed_steps.append(self.name)
                return
        report.stopped_early_at = report.stopped_early_at or self.name
