"""Where an ingest delivery's CPU goes, phase by phase, against the bare claim's.

    python -m bench.ingest_phases [--deliveries 2000] [--db-rtt-ms 1]

Called by ``bench.ingest_throughput`` too (its section in docs/benchmarks.md shows the table).
One thread runs the real handler (``functions/ingest/app.py``) over signed Stripe deliveries;
each phase's function is wrapped to add up the calling thread's CPU time (``time.thread_time``:
waiting on the database costs none): decoding the event, verifying the signature, validating
(parsing and identifying the event), the claim (psycopg building and reading the statement), the
wake-up (the stubbed SendMessage's request body) and the log line. What is left of the handler's
CPU is the glue between them. The baseline is the claim statement alone, as in
``bench.ingest_throughput``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from bench.common import (
    bench_database,
    database_behind_latency,
    median,
    patched,
    quiet_output,
    reset_tables,
    table,
)
from bench.ingest_deliveries import Rig, configure_providers, make_deliveries
from tests.support import FakeLambdaContext
from webhook_inbox.ingest import pipeline, providers
from webhook_inbox.ingest.schemes import base
from webhook_inbox.store import db, inbox

PHASES = ("decode", "verify", "validate", "claim", "enqueue", "log line")


class Meter:
    """CPU seconds per phase, summed over the deliveries run with the wrappers in place."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def wrap(self, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def measured(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] += time.thread_time() - started

        return measured

    @contextmanager
    def installed(self, app: Any, scheme: base.Scheme) -> Iterator[None]:
        scheme_class = type(scheme)
        targets: list[tuple[Any, str, str]] = [
            (pipeline, "decode_event", "decode"),
            (providers.Provider, "verify", "verify"),
            (base.Scheme, "parse", "validate"),
            (scheme_class, "identify", "validate"),
            (inbox, "claim_events", "claim"),
            (pipeline, "_send_wakeups", "enqueue"),
            (app, "observe", "log line"),
        ]
        with ExitStack() as stack:
            for owner, name, phase in targets:
                stack.enter_context(patched(owner, name, self.wrap(phase, getattr(owner, name))))
            yield


def measure(bench: Rig, url: str, deliveries: int) -> dict[str, float]:
    """Microseconds of CPU per delivery: each phase, the rest, the handler and the baseline.

    New deliveries through ``bench``'s handler, then the claim statement alone; the median of
    three passes for each figure."""
    conn = bench.connections("webhook-inbox-ingest")
    conn.autocommit = True
    context = FakeLambdaContext()
    scheme = providers.registry()["stripe"].scheme
    passes: list[dict[str, float]] = []
    for _ in range(3):
        reset_tables(url)
        batch = make_deliveries(deliveries, bench.now)
        meter = Meter()
        started = time.thread_time()
        with quiet_output(), meter.installed(bench.app, scheme):
            for delivery in batch:
                bench.app.handler(delivery.event, context)
        handler = time.thread_time() - started
        reset_tables(url)
        started = time.thread_time()
        for delivery in batch:
            conn.execute(bench.claim_sql, delivery.params).fetchone()
        baseline = time.thread_time() - started
        figures = {phase: s / deliveries * 1e6 for phase, s in meter.seconds.items()}
        figures["rest"] = handler / deliveries * 1e6 - sum(figures.values())
        figures["handler"] = handler / deliveries * 1e6
        figures["baseline"] = baseline / deliveries * 1e6
        passes.append(figures)
    return {key: median([p[key] for p in passes]) for key in passes[0]}


def report(figures: dict[str, float]) -> str:
    baseline = figures["baseline"]
    rows = [
        [phase, f"{figures[phase]:.0f}", f"{figures[phase] / baseline:.2f}x"]
        for phase in (*PHASES, "rest")
    ]
    rows.append(["**handler, all**", f"**{figures['handler']:.0f}**", ""])
    rows.append(["baseline: the claim statement alone", f"{baseline:.0f}", "1.00x"])
    return table(["phase", "CPU µs per delivery", "vs the baseline's CPU"], rows)


def main() -> None:

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--db-rtt-ms", type=float, default=0.0)
    args = parser.parse_args()
    configure_providers()
    with bench_database() as url, database_behind_latency(url, args.db_rtt_ms):
        bench = Rig(url)
        try:
            with (
                patched(db, "get_connection", bench.connections),
                patched(pipeline, "current_time", lambda: float(bench.now)),
            ):
                figures = measure(bench, url, args.deliveries)
        finally:
            bench.close()
    print(report(figures))


if __name__ == "__main__":
    main()
