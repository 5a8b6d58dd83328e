"""What the history kept costs each statement's planning: the server's planning time of every
statement the runtime sends often, on a fresh install's partitions (today, the week ahead, the
old tables) against a 90-day history's (``KEY_RETENTION_DAYS``' default: a partition a day, inbox
and outbox), ratio per statement; and ingest's claim as the runtime makes it (committed, wall
time) on both.

The statements are sent unprepared (RDS Proxy would pin a session on a prepared statement), so
the server plans each one every time it is sent; a statement whose plan names every partition
plans each day's kept. Both layouts are databases of one server, their calls interleaved, each
judged by its fastest call (other load on the machine only adds time): ``EXPLAIN (SUMMARY)``'s
planning time, the statement not run.

    python bench/partition_planning.py [--days 90] [--repeat 15]

Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from bench.common import (  # noqa: E402
    bench_database,
    machine_details,
    machine_line,
    table,
    write_section,
)
from bench.scale_support import interleaved_ms  # noqa: E402
from tests.support import PostgresServer  # noqa: E402
from webhook_inbox.store import inbox, outbox, partition_switch, partitions  # noqa: E402
from webhook_inbox.store.queries import query  # noqa: E402

Conn = psycopg.Connection[Any]
DIGEST = hashlib.sha256(b"{}").digest()
AHEAD_DAYS = 7  # SweeperSettings.partitions_ahead_days

# (who sends it and how often, group, statement, its own parameters). The ids are today's: a
# processor leases what ingest stored minutes ago. from_id is the outbox step's bound for a run
# (the oldest pending message's id; today's here), or none: how every claim was planned before.
STATEMENTS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("ingest, a delivery", "inbox", "claim_events", {}),
    ("ingest, a delivery with an old duplicate", "inbox", "count_duplicates", {}),
    ("processor, a batch", "inbox", "lease_events", {}),
    ("processor, a batch", "inbox", "mark_batch_done", {"disposition": ""}),
    ("processor, a message", "outbox", "add_message", {}),
    ("sweeper, an outbox batch", "outbox", "claim_messages", {"from_id": "today"}),
    ("sweeper, an outbox batch, unbounded", "outbox", "claim_messages", {"from_id": "none"}),
    ("sweeper, an outbox batch", "outbox", "mark_published", {}),
    ("sweeper, a run", "outbox", "oldest_pending_message", {}),
    ("sweeper, a run", "inbox", "expire_leases", {}),
    ("sweeper, a run", "inbox", "claim_due_for_enqueue", {}),
    ("sweeper, a run", "inbox", "event_backlog", {}),
    ("sweeper, a run", "outbox", "message_backlog", {}),
    ("sweeper, a run", "inbox", "purge_payloads", {}),
    ("sweeper, a run", "inbox", "delete_expired_events", {}),
    ("sweeper, a run", "outbox", "delete_published", {}),
    ("sweeper, a quiet run", "inbox", "next_due_event", {}),
    ("sweeper, a quiet run", "outbox", "next_due_message", {}),
]


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def lay_out(conn: Conn, history_days: int) -> None:
    """Both tables switched to partitions, a week ahead, ``history_days`` days kept before today,
    and a day's worth of rows in today's partitions (so the planner's statistics are a live
    table's, not an empty one's)."""
    today = datetime.now(UTC).date()
    for table_ in partitions.TABLES:
        partition_switch.switch_to_partitions(conn, table_)
        for back in range(history_days, 0, -1):
            partitions.create_ahead(conn, days=0, today=today - timedelta(days=back), table=table_)
        partitions.create_ahead(conn, days=AHEAD_DAYS, table=table_)
    for n in range(200):
        inbox.claim_event(
            conn,
            provider="stripe",
            event_id=f"evt_{n}",
            event_type="t",
            body_sha256=DIGEST,
            payload={},
        )
        outbox.add_message(
            conn, topic="t", deduplication_key=f"k_{n}", payload={}, source_event_id=None
        )
    conn.execute("ANALYZE")


def params(own: dict[str, Any]) -> dict[str, Any]:
    today = partitions.day_partition(datetime.now(UTC).date())
    ids = [today.low + n for n in range(1, 11)]
    given: dict[str, Any] = {
        "ids": ids,
        "processed": ids,
        "ignored": [],
        "owner": "bench",
        "lease_seconds": 60,
        "limit": 100,
        "stale_seconds": 480,
        "stale_limit": 250,
        "max_attempts": 5,
        "days": 30,
        "key_days": 90,
        "payload_days": 30,
        "topic": "t",
        "deduplication_key": "k_new",
        "payload": "{}",
        "source_event_id": None,
        "provider": "stripe",
        "event_ids": ["evt_new"],
        "delivery_ids": [None],
        "event_types": ["t"],
        "payloads": Jsonb([{}]),
        "body_sha256": DIGEST,
        "enqueuing": True,
        "rewake_after_s": inbox.REWAKE_AFTER_S,
        "lock_timeout": None,
    }
    given["recent_from"], given["recent_until"] = inbox.recent_ids()
    given.update(own)
    if own.get("from_id") == "today":
        given["from_id"] = partitions.day_partition(datetime.now(UTC).date(), partitions.OUTBOX).low
    elif own.get("from_id") == "none":
        given["from_id"] = -(1 << 63)
    return given


def planning(
    conn: Conn, statement: str, given: dict[str, Any]
) -> tuple[Callable[[int], None], list[float]]:
    """A call that plans ``statement`` once, and the list the server's planning time of each
    call goes to (interleaved_ms times the whole call; only the planning is reported)."""
    explain = "EXPLAIN (SUMMARY, FORMAT JSON) " + statement
    found: list[float] = []

    def run(_: int) -> None:
        with conn.transaction(force_rollback=True):
            plan = conn.execute(explain, given).fetchone()[0][0]  # type: ignore[index]
        found.append(plan["Planning Time"])

    return run, found


def measure(fresh: Conn, kept: Conn, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for who, group, name, own in STATEMENTS:
        runs = [
            planning(conn, query(group, name).as_string(conn), params(own))
            for conn in (fresh, kept)
        ]
        interleaved_ms([run for run, _ in runs], repeat)
        fastest = [min(found[1:]) for _, found in runs]  # the first call warms up
        rows.append({"who": who, "statement": f"{group}.{name}", "ms": fastest})
        progress(f"{who:38s} {group}.{name:28s} {fastest[0]:7.2f} {fastest[1]:7.2f} ms")
    for who, again in (("a new event", False), ("a duplicate", True)):
        claims = []
        for conn, prefix in ((fresh, "f"), (kept, "k")):

            def claim(n: int, conn: Conn = conn, prefix: str = prefix, again: bool = again) -> None:
                key = f"evt_{n % 200}" if again else f"claim_{prefix}_{n}"
                inbox.claim_event(
                    conn,
                    provider="stripe",
                    event_id=key,
                    event_type="t",
                    body_sha256=DIGEST,
                    payload={},
                    enqueuing=True,
                )

            claims.append(claim)
        wall = interleaved_ms(claims, repeat)
        rows.append(
            {
                "who": f"ingest, {who} (wall time, committed)",
                "statement": "inbox.claim_event",
                "ms": [fastest for fastest, _ in wall],
            }
        )
        progress(f"ingest claim, {who}: {wall[0][0]:.2f} {wall[1][0]:.2f} ms")
    return rows


def report(rows: list[dict[str, Any]], days: int, repeat: int, details: dict[str, str]) -> str:
    counts = f"{8 + 1} partitions a table, against {days + 8 + 1}"
    lines = [
        "## Planning against the history kept",
        "",
        f"`python bench/partition_planning.py --days {days} --repeat {repeat}` ·"
        f" {machine_line(details)}",
        "",
        "The server's planning time (`EXPLAIN (SUMMARY)`) of each statement the runtime sends"
        f" often, on a fresh install ({counts} after a {days}-day history), the two databases"
        " on one server and their calls interleaved, each the fastest of"
        f" {repeat} after a warm-up. The runtime sends every statement unprepared (a prepared"
        " statement pins the session behind RDS Proxy), so the server plans it every time it is"
        " sent. Ingest's claim is its wall time as the runtime makes it (committed: a new"
        " event one statement, a duplicate two).",
        "",
    ]
    body = [
        [
            f"{r['who']}: `{r['statement']}`",
            f"{r['ms'][0]:.2f}",
            f"{r['ms'][1]:.2f}",
            f"{r['ms'][1] / r['ms'][0]:.2f}x" if r["ms"][0] > 0 else "—",
        ]
        for r in rows
    ]
    lines.append(
        table(["who, how often: statement", "fresh ms", f"{days}-day history ms", "ratio"], body)
    )
    lines += [
        "",
        "The statements sent per delivery, per batch and per message name the ids or the day"
        " they touch, so the planner keeps only those days' partitions. The outbox claim's"
        " unbounded row is how every claim was planned before it searched from the oldest"
        " pending message on. The sweeper's once-a-run statements search every day kept"
        " (a lease, a due row or a held event can be in any of them), so their planning grows"
        " with the days kept; a shorter `KeyRetentionDays` shortens it.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=90, help="days of history kept")
    parser.add_argument("--repeat", type=int, default=15, help="calls per statement and layout")
    args = parser.parse_args()
    server = PostgresServer()
    try:
        with bench_database(server) as fresh_url, bench_database(server) as kept_url:
            with (
                # As the runtime's connections: nothing prepared (store/db.py), so the server
                # plans every statement every time, as behind RDS Proxy.
                psycopg.connect(fresh_url, autocommit=True, prepare_threshold=None) as fresh,
                psycopg.connect(kept_url, autocommit=True, prepare_threshold=None) as kept,
            ):
                progress("laying out the fresh install and the kept history")
                lay_out(fresh, 0)
                lay_out(kept, args.days)
                rows = measure(fresh, kept, args.repeat)
            details = machine_details(fresh_url)
    finally:
        server.stop()
    markdown = report(rows, args.days, args.repeat, details)
    write_section("partition_planning", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
