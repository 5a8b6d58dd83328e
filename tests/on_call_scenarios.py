"""The on-call classes of infra/RUNBOOK.md as timelines (tests/integration/infra/test_on_call.py).

A class is a 30-minute timeline over healthy traffic: the real functions' lines for each minute
(recorded once by the test's fixture), Lambda's own metrics and lines where the failure is
Lambda's, all passed through the model of Lambda's log-level filter and the template's metric
filters and EMF (tests/alarm_model.py). The RUNBOOK's table is parsed here too: each class's
alarm and the query that finds its evidence.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.alarm_model import (
    STACK,
    WEEKDAY_NOON,
    Datapoint,
    Levels,
    lambda_metric,
    metrics_of,
    platform_report,
    reaches_cloudwatch,
    runtime_error_line,
    template_alarms,
)
from tests.infra_support import ROOT, load_template

MINUTES = 30
FAILING = range(5, 25)  # the minutes a failure lasts in its timeline
# Timelines of failures judged over an hour (a quiet sender's deliveries): two hours.
LONG_MINUTES = 120
FUNCTIONS = {
    "ingest": "IngestFunction",
    "processor": "ProcessorFunction",
    "sweeper": "SweeperFunction",
    # Either operator function (the same code at two levels; one alarm watches both): the act
    # one stands for them here.
    "operator": "OperatorActFunction",
}
LOG_GROUP = {
    "ingest": "IngestLogGroup",
    "processor": "ProcessorLogGroup",
    "sweeper": "SweeperLogGroup",
    "operator": "OperatorActLogGroup",
}


@dataclass
class Run:
    """One invocation of a real function: what it wrote, and whether it raised."""

    function: str
    lines: list[dict[str, Any]]
    raised: bool = False
    answer: Any = None  # what the handler returned (the processor's batchItemFailures)


# --- timelines ---------------------------------------------------------------------------------


@dataclass
class Timeline:
    """What CloudWatch holds after MINUTES of one scenario, at one level combination."""

    levels: Levels
    points: list[Datapoint] = field(default_factory=list)
    lines: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    clock: datetime = WEEKDAY_NOON  # minute 0, UTC
    parameters: dict[str, str] = field(default_factory=dict)  # the template's, over defaults
    minutes: int = MINUTES  # how long it lasts

    def kept(self, lines: list[dict[str, Any]], function: str = "") -> list[dict[str, Any]]:
        log_level, application, system, ingest_system = self.levels
        if function == "ingest":
            system = ingest_system
        return [
            line
            for line in lines
            if reaches_cloudwatch(
                line, log_level=log_level, application_level=application, system_level=system
            )
        ]

    def write(self, function: str, minute: int, lines: list[dict[str, Any]]) -> None:
        kept = self.kept(lines, function)
        self.lines.setdefault(function, []).extend(kept)
        self.points += metrics_of(kept, LOG_GROUP[function], minute)

    def run(self, minute: int, run: Run, times: int = 1) -> None:
        for _ in range(times):
            self.invoked(run.function, minute, run.lines, failed=run.raised)

    def invoked(
        self, function: str, minute: int, lines: list[dict[str, Any]], *, failed: bool = False
    ) -> None:
        """One invocation: Lambda counts it (and its failure); its lines reach the log group."""
        self.points.append(lambda_metric(minute, "Invocations", FUNCTIONS[function]))
        if failed:
            self.points.append(lambda_metric(minute, "Errors", FUNCTIONS[function]))
        self.write(function, minute, lines)

    def firing(self) -> set[str]:
        return {
            name
            for name, alarm in template_alarms(**self.parameters).items()
            if alarm.fires(self.points, self.minutes, self.clock)
        }


def healthy(
    runs: dict[str, Run],
    levels: Levels,
    *,
    skip: str | set[str] = "",
    clock: datetime = WEEKDAY_NOON,
) -> Timeline:
    """Steady traffic: deliveries, batches and a sweep every minute (``skip``: the functions
    whose invocations the scenario replaces while the failure lasts)."""
    skipped = {skip} if isinstance(skip, str) else skip
    timeline = Timeline(levels, clock=clock)
    for minute in range(MINUTES):
        replaced = minute in FAILING
        if not (replaced and "ingest" in skipped):
            timeline.run(minute, runs["accepted"], times=3)
        if not (replaced and "processor" in skipped):
            timeline.run(minute, runs["batch"])
        if not (replaced and "sweeper" in skipped):
            timeline.run(minute, runs["sweep"])
    return timeline


def idle(runs: dict[str, Run], levels: Levels, *, sweep: str = "sweep") -> Timeline:
    """No delivery at all, so no batch: only the sweeper's runs (``sweep`` while the failure
    lasts). What a stack sees between a sender's rare deliveries."""
    timeline = Timeline(levels)
    for minute in range(MINUTES):
        timeline.run(minute, runs[sweep if minute in FAILING else "sweep"])
    return timeline


Scenario = Callable[[dict[str, Run], Levels], Timeline]


def lasting(run_name: str, times: int = 1, *, replaces: str = "") -> Scenario:
    """A real outcome that repeats every minute while the failure lasts."""

    def build(runs: dict[str, Run], levels: Levels) -> Timeline:
        timeline = healthy(runs, levels, skip=replaces)
        for minute in FAILING:
            timeline.run(minute, runs[run_name], times)
        return timeline

    return build


def killed(
    function: str, status: str, error_type: str | None = None, *, said: str = ""
) -> Scenario:
    """Lambda ends the invocation (timeout, memory): it counts an error, and its report is
    the only line it writes; ``said``: the run whose lines the function wrote before the kill
    (ingest's own evidence, the watchdog's "timing out" or its "memory high")."""

    def build(runs: dict[str, Run], levels: Levels) -> Timeline:
        timeline = healthy(runs, levels, skip=function)
        before = runs[said].lines if said else []
        for minute in FAILING:
            report = platform_report(f"req-{minute}", status, error_type=error_type)
            timeline.invoked(function, minute, [*before, report], failed=True)
        return timeline

    return build


def raising(function: str) -> Scenario:
    """An exception escapes the handler: the runtime's error line and an error."""

    def build(runs: dict[str, Run], levels: Levels) -> Timeline:
        timeline = healthy(runs, levels, skip=function)
        for minute in FAILING:
            line = runtime_error_line(f"req-{minute}", "KeyError")
            timeline.invoked(function, minute, [line], failed=True)
        return timeline

    return build


def metric(namespace: str, name: str, dimensions: dict[str, str], value: float) -> Scenario:
    """A failure seen only in a metric (a queue's depth, a gauge the sweeper reports)."""

    def build(runs: dict[str, Run], levels: Levels) -> Timeline:
        timeline = healthy(runs, levels)
        dims = tuple(sorted(dimensions.items()))
        timeline.points += [Datapoint(m, namespace, name, dims, value) for m in FAILING]
        return timeline

    return build


# The processing queue's VisibilityTimeout (minutes) and maxReceiveCount.
_QUEUE = load_template()["Resources"]["ProcessingQueue"]["Properties"]
VISIBILITY_MIN = int(_QUEUE["VisibilityTimeout"]) // 60
MAX_RECEIVES = int(_QUEUE["RedrivePolicy"]["maxReceiveCount"])


def queued_wakeups(timeline: Timeline, runs: dict[str, Run], first: str, last: str) -> None:
    """The wake-ups queued when the failure began: received every visibility timeout while it
    lasts (``first`` the processor's run for the receives before the last, ``last`` for the
    last). If the last one hands the message back, SQS's redrive moves it to the DLQ at the
    next receive, and it stays there: the DLQ's depth from then on."""
    receives = [FAILING.start + n * VISIBILITY_MIN for n in range(MAX_RECEIVES)]
    if receives[-1] + VISIBILITY_MIN >= FAILING.stop:
        raise ValueError("the failure ends before the queue's last receive")
    for n, minute in enumerate(receives, 1):
        timeline.run(minute, runs[last if n == MAX_RECEIVES else first])
    if runs[last].answer["batchItemFailures"]:
        dlq = (("QueueName", "ProcessingDeadLetterQueue"),)
        moved = receives[-1] + VISIBILITY_MIN
        timeline.points += [
            Datapoint(m, "AWS/SQS", "ApproximateNumberOfMessagesVisible", dlq, 1.0)
            for m in range(moved, timeline.minutes)
        ]


def database_down(clock: datetime = WEEKDAY_NOON) -> Scenario:
    """The database unreachable: every delivery answered 503, every sweep ends without it, and
    the wake-ups queued when it went away come back every visibility timeout to a processor
    that cannot lease their rows (nothing new is stored, and the sweeper sends no re-wake)."""

    def build(runs: dict[str, Run], levels: Levels) -> Timeline:
        timeline = healthy(runs, levels, skip={"ingest", "processor", "sweeper"}, clock=clock)
        for minute in FAILING:
            timeline.run(minute, runs["ingest_503_store"], times=3)
            timeline.run(minute, runs["sweep_database_down"])
        queued_wakeups(timeline, runs, "processor_store_down", "processor_store_down_last")
        return timeline

    return build


def processor_secret_unreadable(runs: dict[str, Run], levels: Levels) -> Timeline:
    """The database secret unreadable by the processor: every batch handed back, the queued
    wake-ups' last receives included."""
    timeline = healthy(runs, levels, skip="processor")
    for minute in FAILING:
        timeline.run(minute, runs["processor_secret"])
    queued_wakeups(timeline, runs, "processor_secret", "processor_secret_last")
    return timeline


# The default maintenance window (MaintenanceWindowDay sun, MaintenanceWindowHour 04): the
# timeline starts five minutes before it, so the instance is down from 04:00 to 04:20.
BEFORE_MAINTENANCE = datetime(2026, 12, 6, 3, 55, tzinfo=UTC)


def exhausted_concurrency(runs: dict[str, Run], levels: Levels) -> Timeline:
    """The account's concurrency used up elsewhere: Lambda refuses every function's
    invocations (a throttle each, no line), the schedule's included."""
    timeline = healthy(runs, levels, skip={"ingest", "processor", "sweeper"})
    for minute in FAILING:
        for function, refused in (("IngestFunction", 3), ("ProcessorFunction", 1)):
            timeline.points.append(lambda_metric(minute, "Throttles", function, refused))
        timeline.points.append(lambda_metric(minute, "Throttles", "SweeperFunction"))
    return timeline


def deliveries_stop(runs: dict[str, Run], levels: Levels) -> Timeline:
    """A sender that stopped sending, with the no-delivery alarm on (an hour)."""
    timeline = idle(runs, levels)
    timeline.parameters["NoDeliveryAlarmHours"] = "1"
    return timeline


def dead_letters(runs: dict[str, Run], levels: Levels) -> Timeline:
    """Events dead-lettered, and from then on every sweep reports the rows waiting."""
    timeline = healthy(runs, levels, skip="sweeper")
    for minute in FAILING:
        timeline.run(minute, runs["dead_letter"])
        timeline.run(minute, runs["sweep_with_dead_letters"])
    return timeline


def quiet_sender_refused(run_name: str) -> Scenario:
    """A sender of one delivery an hour whose every delivery is refused (its secret rotated on
    its side only; its clock off by more than the tolerance): two hours, a sweep every minute,
    nothing else."""

    def build(runs: dict[str, Run], levels: Levels) -> Timeline:
        timeline = Timeline(levels, minutes=LONG_MINUTES)
        for minute in range(LONG_MINUTES):
            timeline.run(minute, runs["sweep"])
            if minute % 60 == 10:
                timeline.run(minute, runs[run_name])
        return timeline

    return build


def busy_sender_refused(runs: dict[str, Run], levels: Levels) -> Timeline:
    """A busy sender's secret rotated on its side only: for two hours every one of its 30
    deliveries a minute is refused. Both halves of the alarm see it; it pages once."""
    timeline = Timeline(levels, minutes=LONG_MINUTES)
    for minute in range(LONG_MINUTES):
        timeline.run(minute, runs["sweep"])
        timeline.run(minute, runs["rejected_signature"], 30)
    return timeline


def stray_refusal(runs: dict[str, Run], levels: Levels) -> Timeline:
    """A provider's deliveries accepted all along, and one forged or garbled request an hour
    for it: not every delivery was refused, so no page."""
    timeline = Timeline(levels, minutes=LONG_MINUTES)
    for minute in range(LONG_MINUTES):
        timeline.run(minute, runs["sweep"])
        if minute % 20 == 0:
            timeline.run(minute, runs["accepted"])
        if minute % 60 == 30:
            timeline.run(minute, runs["rejected_signature"])
    return timeline


def sweeper_stops(runs: dict[str, Run], levels: Levels) -> Timeline:
    return healthy(runs, levels, skip="sweeper")


def throttled(per_minute: float, minutes: range) -> Scenario:
    def build(runs: dict[str, Run], levels: Levels) -> Timeline:
        timeline = healthy(runs, levels)
        for minute in minutes:
            timeline.points.append(lambda_metric(minute, "Throttles", "IngestFunction", per_minute))
            timeline.run(minute + 1, runs["accepted"], times=int(per_minute))  # retried, accepted
        return timeline

    return build


GAUGE = {"service": STACK}


def _memory_high(function: str) -> str:
    """Ingest's line before a memory kill: its peak passed 80 % of its size in an earlier
    delivery (a body that cannot fit is refused before it is parsed, so the growth is gradual)."""
    return "ingest_memory_high" if function == "ingest" else ""


# The RUNBOOK table's classes: (function it names for "the function", scenario) per variant.
CLASSES: dict[str, list[tuple[str, Scenario]]] = {
    "ingest answers 500": [("ingest", lasting("ingest_500"))],
    "the database is down or does not answer": [
        ("ingest", database_down()),
        # No delivery at all: the sweeper's run, once a minute, pages alone.
        ("sweeper", lambda runs, levels: idle(runs, levels, sweep="sweep_database_down")),
    ],
    "RDS maintenance in the weekly window": [("ingest", database_down(BEFORE_MAINTENANCE))],
    "a secret cannot be read (ingest, processor, sweeper)": [
        ("ingest", lasting("ingest_secret")),
        ("processor", processor_secret_unreadable),
        ("sweeper", lasting("sweeper_secret", replaces="sweeper")),
    ],
    "a sender's certificate or key cannot be had, or an SNS subscription cannot be confirmed": [
        ("ingest", lasting("ingest_503_sender"))
    ],
    "a provider's secret in Secrets Manager cannot be read, at any traffic": [
        # No delivery at all: the sweeper's check, each secret once per five minutes, its
        # verdict reported every run.
        ("sweeper", lasting("sweep_provider_secret_unreadable", replaces="sweeper"))
    ],
    "the providers registry cannot be read": [
        # Warm environments: their copy accepts what it verifies for a minute, reads backing off.
        ("ingest", lasting("ingest_registry_refresh_failed", 2)),
        # A new execution environment that never read the registry: 503s.
        ("ingest", lasting("ingest_registry_cold")),
        # No deliveries at all: the sweeper's read, once a run, pages alone.
        ("sweeper", lasting("sweep_registry_unreadable", replaces="sweeper")),
    ],
    "a provider has no live secret": [
        ("sweeper", lasting("sweep_provider_without_live_secret", replaces="sweeper"))
    ],
    "the providers registry emptied (wiped, or its last provider removed)": [
        ("sweeper", lasting("sweep_registry_empty", replaces="sweeper"))
    ],
    "ingest raises": [("ingest", raising("ingest"))],
    "the processor raises": [("processor", raising("processor"))],
    "the sweeper raises": [("sweeper", raising("sweeper"))],
    "an operator function raises": [("operator", raising("operator"))],
    "a function times out": [
        (fn, killed(fn, "timeout", said="ingest_timing_out" if fn == "ingest" else ""))
        for fn in FUNCTIONS
    ],
    "a function runs out of memory": [
        (fn, killed(fn, "error", "Runtime.OutOfMemory", said=_memory_high(fn))) for fn in FUNCTIONS
    ],
    "throttling that lasts 15 minutes": [("ingest", throttled(3, FAILING))],
    "the account's concurrency exhausted (every function throttled)": [
        ("ingest", exhausted_concurrency)
    ],
    "an event dead-lettered": [("processor", dead_letters)],
    "a handler key fails on every event (a downstream down)": [
        ("sweeper", lasting("sweep_with_open_circuit", replaces="sweeper"))
    ],
    "a pause older than `PauseAlarmHours`": [
        ("sweeper", lasting("sweep_with_old_pause", replaces="sweeper"))
    ],
    "an operator pauses a provider or a key": [
        ("sweeper", metric("WebhookInbox", "BacklogCount", {**GAUGE, "status": "held"}, 500))
    ],
    "a wake-up message in the SQS DLQ": [
        (
            "processor",
            metric(
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                {"QueueName": "ProcessingDeadLetterQueue"},
                1,
            ),
        )
    ],
    "an outbox that does not drain": [
        ("sweeper", metric("WebhookInbox", "OldestOutboxAgeSeconds", GAUGE, 1200))
    ],
    "the sweeper does not run": [("sweeper", sweeper_stops)],
    "no delivery for `NoDeliveryAlarmHours` (when set)": [("ingest", deliveries_stop)],
    "signatures rejected, sustained": [
        ("ingest", lasting("rejected_signature", 30)),
        ("ingest", busy_sender_refused),
    ],
    "every delivery of one provider refused for an hour (a quiet sender)": [
        ("ingest", quiet_sender_refused("rejected_signature")),
        ("ingest", quiet_sender_refused("rejected_stale")),
    ],
    "accepted events wait past the threshold": [
        ("sweeper", metric("WebhookInbox", "OldestUnprocessedAgeSeconds", GAUGE, 1200))
    ],
    "a provider's retried burst above `IngestReservedConcurrency` (`Endpoint=FunctionUrl`)": [
        ("ingest", throttled(200, range(5, 6)))
    ],
    "a duplicate delivery": [("ingest", lasting("duplicate", 10))],
    "stale timestamps from a sender's clock, below the signature threshold": [
        ("ingest", lasting("rejected_stale", 4))
    ],
    "a stray refused request among a provider's accepted deliveries": [("ingest", stray_refusal)],
}


# --- the RUNBOOK's table --------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    failure: str
    alarm: str  # the link text: an alarm name, "x-, y- or z-errors", or "none (designed)"
    anchor: str | None
    evidence: str


def runbook() -> str:
    return (ROOT / "infra" / "RUNBOOK.md").read_text()


def table_rows() -> list[Row]:
    lines = runbook().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| failure class |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        failure, alarm, _sees, evidence, _fix = cells
        link = re.fullmatch(r"\[(.+)\]\(#([a-z0-9-]+)\)", alarm)
        rows.append(
            Row(
                failure=failure,
                alarm=link[1] if link else alarm,
                anchor=link[2] if link else None,
                evidence=evidence.replace("\\|", "|"),
            )
        )
    return rows


def expected_alarm(row: Row, function: str) -> str | None:
    if row.anchor is None:
        assert row.alarm == "none (designed)", row
        return None
    if row.alarm == "ingest-, processor-, sweeper- or operator-errors":
        return f"{function}-errors"
    return row.alarm


def evidence_query(row: Row, function: str) -> tuple[list[str], str] | None:
    """(the functions whose log groups it searches, the Logs Insights query), or None."""
    found = re.fullmatch(r"([a-z, ]+): `(.+)`", row.evidence)
    if found is None:
        return None
    groups = [g.strip() for g in found[1].split(",")]
    return [function if g == "the function" else g for g in groups], found[2]


def runbook_queries() -> list[str]:
    """Every Logs Insights query the RUNBOOK gives: its fenced blocks and its table."""
    fenced = re.findall(r"```logs-insights\n(.*?)```", runbook(), flags=re.DOTALL)
    queries = [" ".join(block.split()) for block in fenced]
    for row in table_rows():
        found = evidence_query(row, "ingest")
        if found:
            queries.append(found[1])
    return queries
