"""The sweeper's own queries read their indexes, not the whole table (most rows are history)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from webhook_inbox.queries import query


@pytest.fixture
def populated(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    # 20,000 events, 99 % processed (a tenth of those old enough to purge), 1 % received.
    conn.execute(
        "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload, status,"
        " processed_at, updated_at) SELECT 'stripe', 'evt_' || g, 'x', sha256(g::text::bytea), %s,"
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
    conn.execute("ANALYZE webhook_events")
    conn.execute("ANALYZE outbox_messages")
    return conn


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("event_backlog", "webhook_events_status_received_idx"),
        ("purge_payloads", "webhook_events_purgeable_idx"),
        ("delete_expired_events", "webhook_events_terminal_idx"),
        ("delete_published_outbox", "outbox_messages_status_idx"),
    ],
)
def test_sweeper_query_uses_its_index(
    populated: psycopg.Connection[Any], name: str, index: str
) -> None:
    statement = query("sweeper", name).as_string(populated)
    with populated.transaction(force_rollback=True):
        rows = populated.execute(
            "EXPLAIN " + statement,  # type: ignore[operator]
            {"days": 30, "limit": 500},
        ).fetchall()
    plan = "\n".join(r[0] for r in rows)
    assert index in plan, plan
    assert "Seq Scan" not in plan, plan
