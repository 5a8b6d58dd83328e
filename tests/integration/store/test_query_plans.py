"""The processor's and sweeper's queries read their indexes, not the whole table (most rows
are history).

The inbox and the outbox are partitioned by day: a plan reads each partition through that
partition's copy of the index (named after the partition), and the planner may scan an empty
partition (today's neighbours, the old table's) sequentially, at no cost.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from webhook_inbox.store import inbox, partitions
from webhook_inbox.store.queries import query

PARAMS: dict[str, Any] = {
    "ids": [1, 2, 3],
    "owner": "w",
    "lease_seconds": 60,
    "limit": 100,
    "stale_seconds": 300,
    "stale_limit": 100,
    "max_attempts": 5,
    "days": 30,
    "from_id": 1,
}


@pytest.fixture
def populated(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    # Mostly terminal rows, as in production: the ready states are a thin slice. 20,000 events,
    # 99 % processed (a tenth of those old enough for retention), 1 % received.
    conn.execute(
        "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload, status,"
        " processed_at, updated_at) SELECT 'stripe', 'evt_' || g, 'x', sha256(g::text::bytea), %s,"
        " CASE WHEN g %% 100 = 0 THEN 'received' ELSE 'processed' END,"
        " CASE WHEN g %% 100 = 0 THEN NULL ELSE now() END,"
        " CASE WHEN g %% 10 = 1 THEN now() - interval '40 days' ELSE now() END"
        " FROM generate_series(1, 20000) AS g",
        (Jsonb({}),),
    )
    # The same again in the old table's partition (ids below 2^32: rows stored before the
    # switch), which retention still deletes row by row.
    conn.execute(
        "INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256, payload,"
        " status, processed_at, updated_at) SELECT g, 'stripe', 'old_' || g, 'x',"
        " sha256(g::text::bytea), %s,"
        " CASE WHEN g %% 100 = 0 THEN 'received' ELSE 'processed' END,"
        " CASE WHEN g %% 100 = 0 THEN NULL ELSE now() END,"
        " CASE WHEN g %% 10 = 1 THEN now() - interval '40 days' ELSE now() END"
        " FROM generate_series(1, 20000) AS g",
        (Jsonb({}),),
    )
    conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload, status, published_at)"
        " SELECT 't', 'k' || g, '{}', CASE WHEN g % 100 = 0 THEN 'pending' ELSE 'published' END,"
        " CASE WHEN g % 100 = 0 THEN NULL ELSE now() END FROM generate_series(1, 20000) AS g"
    )
    # One attempt that did not process it for every tenth event (retention deletes them along).
    conn.execute(
        "INSERT INTO webhook_event_attempts (event_row_id, attempt, started_at, ended_at, outcome)"
        " SELECT id, 1, received_at, received_at, 'failed' FROM webhook_events WHERE id % 10 = 0"
    )
    conn.execute("ANALYZE webhook_events")
    conn.execute("ANALYZE outbox_messages")
    conn.execute("ANALYZE webhook_event_attempts")
    return conn


def _index_names(conn: psycopg.Connection[Any], index: str) -> set[str]:
    """An index's name and those of its partitions' copies."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.oid = to_regclass(%s)"
        " UNION SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = to_regclass(%s)",
        (index, index),
    ).fetchall()
    return {index} | {r[0] for r in rows}


def _full_scans(conn: psycopg.Connection[Any], plan: str) -> list[str]:
    """The tables the plan reads whole that hold a row."""
    scanned = set(re.findall(r"Seq Scan on (\w+)", plan))
    return [
        table
        for table in sorted(scanned)
        if conn.execute(f"SELECT EXISTS (SELECT FROM {table})").fetchone() != (False,)  # noqa: S608
    ]


def _plan(conn: psycopg.Connection[Any], group: str, name: str) -> str:
    statement = query(group, name).as_string(conn)
    with conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN " + statement, PARAMS).fetchall()  # type: ignore[operator]
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize(
    ("group", "name", "index"),
    [
        ("inbox", "claim_due_for_enqueue", {"webhook_events_unsent_idx"}),
        # No row is processing here, so either index finds nothing equally fast.
        (
            "inbox",
            "expire_leases",
            {
                "webhook_events_lease_idx",
                "webhook_events_status_received_idx",
                "webhook_events_backlog_idx",
            },
        ),
        ("inbox", "lease_events", {"webhook_events_pkey"}),
        ("outbox", "claim_messages", {"outbox_messages_ready_idx"}),
        ("outbox", "message_backlog", {"outbox_messages_backlog_idx"}),
        # The sweeper's own statements: backlog metrics and retention.
        ("inbox", "event_backlog", {"webhook_events_backlog_idx"}),
        ("inbox", "purge_payloads", {"webhook_events_purgeable_idx"}),
        ("inbox", "delete_expired_events", {"webhook_events_terminal_idx"}),
        ("outbox", "delete_published", {"outbox_messages_status_idx"}),
    ],
)
def test_query_uses_its_index(
    populated: psycopg.Connection[Any], group: str, name: str, index: set[str]
) -> None:
    plan = _plan(populated, group, name)
    names = set().union(*(_index_names(populated, candidate) for candidate in index))
    assert any(re.search(rf"\b{name}\b", plan) for name in names), plan
    assert _full_scans(populated, plan) == [], plan


def test_the_re_enqueue_reads_both_of_its_indexes(populated: psycopg.Connection[Any]) -> None:
    # Never-sent rows by due time, and rows sent long ago by send time (the stale rule).
    plan = _plan(populated, "inbox", "claim_due_for_enqueue")
    for index in ("webhook_events_unsent_idx", "webhook_events_sent_idx"):
        names = _index_names(populated, index)
        assert any(re.search(rf"\b{name}\b", plan) for name in names), (index, plan)
    assert _full_scans(populated, plan) == [], plan


# The processor's statements that update inbox rows by id. An UPDATE joined to a subquery (or an
# unnest) that holds the ids in an array is not pruned by the join: every day's partition (99 at
# the default key retention) was planned as its target on every batch. (A single id is: the
# planner carries the constant across the join.)
BY_ID = [
    ("inbox", "lease_events", {}),
    ("inbox", "mark_batch_done", {"processed": [], "ignored": [], "disposition": ""}),
    ("inbox", "mark_failed", {"delay_seconds": 1, "error_kind": "x", "error": "x"}),
    ("inbox", "mark_dead_letter", {"error_kind": "x", "error": "x"}),
    ("pacing", "defer_rows", {"due_at": []}),
    # Ingest's count of a delivery's duplicates.
    ("inbox", "count_duplicates", {"enqueuing": True, "rewake_after_s": 2, "lock_timeout": None}),
]


@pytest.mark.parametrize(("group", "name", "params"), BY_ID, ids=[n for _, n, _ in BY_ID])
def test_the_processors_updates_plan_only_the_partitions_of_their_ids(
    conn: psycopg.Connection[Any], group: str, name: str, params: dict[str, Any]
) -> None:
    today = datetime.now(UTC).date()
    for back in range(1, 31):  # a month of history, as a deployed inbox has
        partitions.create_ahead(conn, days=0, today=today - timedelta(days=back))
    day = partitions.day_partition(today)
    row_id = day.low + 7
    given = {**PARAMS, **params, "ids": [row_id], "id": row_id}
    if name == "mark_batch_done":
        given["processed"] = [row_id]
    statement = query(group, name).as_string(conn)
    with conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN " + statement, given).fetchall()  # type: ignore[operator]
    plan = "\n".join(r[0] for r in rows)
    planned = set(re.findall(r"\bon (webhook_events_\w+)", plan))
    assert planned == {day.name}, plan


def test_a_claim_plans_only_the_last_few_days_partitions(conn: psycopg.Connection[Any]) -> None:
    """Ingest's claim counts its duplicates on the days it names (the last few): the planner
    keeps only those days' partitions however many days are kept (without the bound it planned
    every one on every delivery)."""
    today = datetime.now(UTC).date()
    for back in range(1, 31):
        partitions.create_ahead(conn, days=0, today=today - timedelta(days=back))
    recent_from, recent_until = inbox.recent_ids()
    given = {
        "provider": "stripe",
        "event_ids": ["evt_1"],
        "delivery_ids": [None],
        "event_types": ["t"],
        "payloads": Jsonb([{}]),
        "body_sha256": b"x",
        "enqueuing": True,
        "rewake_after_s": 2,
        "lock_timeout": None,
        "recent_from": recent_from,
        "recent_until": recent_until,
    }
    statement = query("inbox", "claim_events").as_string(conn)
    with conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN " + statement, given).fetchall()  # type: ignore[operator]
    plan = "\n".join(r[0] for r in rows)
    planned = {
        datetime.strptime(d, "%Y%m%d").date()
        for d in re.findall(r"\bwebhook_events_p(\d{8})\b", plan)
    }
    back, ahead = inbox.RECENT_DAYS_BACK, inbox.RECENT_DAYS_AHEAD
    assert planned, plan
    assert all(
        today - timedelta(days=back) <= day <= today + timedelta(days=ahead) for day in planned
    ), plan
