"""add_message runs the function webhook_inbox_add_message (migration 0014), whose plan each
session keeps: it must do what the statement it replaced did, on the outbox as the sweeper's
switch leaves it (partitioned, with messages stored before the switch whose keys are not
filled yet) and as it is before the switch."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from webhook_inbox.store import outbox
from webhook_inbox.store.migrate import migrate

# outbox.sql's add_message before migration 0014, as it was sent (comments aside).
STATEMENT = """
WITH given AS MATERIALIZED (
    SELECT (SELECT o.id FROM outbox_messages o
             WHERE o.deduplication_key = %(deduplication_key)s AND o.id < 4294967296) AS stored
), keyed AS (
    INSERT INTO outbox_message_keys (deduplication_key, message_id)
    SELECT %(deduplication_key)s, coalesce(g.stored, webhook_inbox_next_message_id())
      FROM given g
    ON CONFLICT (deduplication_key) DO NOTHING
    RETURNING message_id
)
INSERT INTO outbox_messages (id, topic, deduplication_key, payload, source_event_id)
OVERRIDING SYSTEM VALUE
SELECT k.message_id, %(topic)s, %(deduplication_key)s, %(payload)s, %(source_event_id)s
  FROM keyed k, given g
 WHERE g.stored IS NULL
RETURNING id
"""


def _by_statement(conn: psycopg.Connection[Any], **params: Any) -> bool:
    row = conn.execute(STATEMENT, {**params, "payload": Jsonb(params["payload"])}).fetchone()
    return row is not None


def _stored_before_switch(conn: psycopg.Connection[Any], key: str, message_id: int) -> None:
    """A message of the old table whose key the sweeper has not filled yet (the keys' trigger,
    put on by the switch, left out as the release before's insert did not run it)."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            "INSERT INTO outbox_messages (id, topic, deduplication_key, payload)"
            " OVERRIDING SYSTEM VALUE VALUES (%s, 't', %s, '{}')",
            (message_id, key),
        )


def _outcomes(conn: psycopg.Connection[Any], add: Any, prefix: str, old_id: int) -> list[Any]:
    def call(key: str) -> bool:
        return bool(
            add(
                conn,
                topic="customer.created",
                deduplication_key=f"{prefix}{key}",
                payload={"key": key},
                source_event_id=None,  # the inbox row it names is not this test's point
            )
        )

    _stored_before_switch(conn, f"{prefix}old", old_id)
    added = [call("new"), call("new"), call("old"), call("old"), call("other")]
    rows = conn.execute(
        "SELECT substr(m.deduplication_key, length(%s) + 1), m.topic, m.payload,"
        "       m.source_event_id, m.id = k.message_id, m.id < 4294967296"
        "  FROM outbox_messages m JOIN outbox_message_keys k USING (deduplication_key)"
        " WHERE m.deduplication_key LIKE %s || '%%' ORDER BY 1",
        (prefix, prefix),
    ).fetchall()
    return [added, rows]


@pytest.mark.parametrize("switched", [True, False], ids=["partitioned", "before the switch"])
def test_the_function_adds_and_refuses_what_the_statement_did(
    conn: psycopg.Connection[Any], empty_database_url: str, switched: bool
) -> None:
    if not switched:
        with psycopg.connect(empty_database_url) as fresh:
            migrate(fresh)
        conn = psycopg.connect(empty_database_url, autocommit=True)
    try:
        by_function = _outcomes(conn, outbox.add_message, "f:", 1_000_001)
        by_statement = _outcomes(conn, _by_statement, "s:", 1_000_002)
    finally:
        if not switched:
            conn.close()
    assert by_function == by_statement
    added, rows = by_function
    assert added == [True, False, False, False, True]
    assert [r[0] for r in rows] == ["new", "old", "other"]
    assert all(r[4] for r in rows)  # every message's key points at it
    assert [r[5] for r in rows] == [not switched, True, not switched]  # ids carry their day
