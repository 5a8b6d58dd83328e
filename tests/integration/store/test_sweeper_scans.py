"""The sweeper's re-enqueue costs O(its batch), not O(the backlog waiting in SQS).

Suspected in issue 14 and confirmed: before 0004 the statement stepped over every received row
already sent to SQS on each sweep (its index held them all). Measured with EXPLAIN (ANALYZE,
BUFFERS): the buffers one sweep touches must not grow with the backlog. bench/sweeper_plans.py
measures every sweeper step the same way on a multi-million-row inbox.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from webhook_inbox.store.queries import query

BATCH = 10


def _add_backlog(conn: psycopg.Connection[Any], first: int, count: int) -> None:
    """``count`` received rows already sent to SQS a minute ago (waiting in the queue)."""
    conn.execute(
        "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload,"
        " enqueued_at, available_at)"
        " SELECT 'stripe', 'evt_' || g, 'x', sha256(g::text::bytea), %s,"
        " now() - interval '1 minute', now() - interval '1 minute'"
        " FROM generate_series(%s::int, %s::int) AS g",
        (Jsonb({}), first, first + count - 1),
    )


def _sweep_buffers(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(buffers touched, rows claimed) by one re-enqueue, rolled back."""
    statement = query("inbox", "claim_due_for_enqueue").as_string(conn)
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement,  # type: ignore[operator]
            {"limit": BATCH, "stale_seconds": 900, "stale_limit": BATCH},
        ).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    return int(buffers), int(plan["Plans"][0]["Actual Rows"]) if "Plans" in plan else -1


def test_the_re_enqueue_reads_its_batch_not_the_backlog(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload)"
        " SELECT 'stripe', 'unsent_' || g, 'x', sha256(('u' || g)::bytea), '{}'"
        " FROM generate_series(1, 50) AS g"
    )
    _add_backlog(conn, 1, 2_000)
    conn.execute("VACUUM ANALYZE webhook_events")
    small, _ = _sweep_buffers(conn)

    _add_backlog(conn, 2_001, 40_000)
    conn.execute("VACUUM ANALYZE webhook_events")
    large, _ = _sweep_buffers(conn)

    # 20 times the backlog, about the same work (before 0004: 4,000+ buffers, growing with it).
    assert large < small * 2 + 50, (small, large)
    assert large < 400, large
