"""`webhook-inbox pause`, `resume` and `paused` on a database: what a pause holds comes back in
arrival order, every refusal says why and changes nothing."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.integration.cli.conftest import seed_event, table_snapshot

HELD_MARK = "9999-01-01 00:00:00+00"  # what the processor's lease writes for a held row


def _hold(conn: psycopg.Connection[Any], row_id: int) -> None:
    conn.execute("UPDATE webhook_events SET available_at = %s WHERE id = %s", (HELD_MARK, row_id))


def test_pause_list_resume_with_who_why_and_what_was_held(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    paused = cli("pause", "stripe", "--reason", "vendor incident", "--operator", "alice")
    assert paused.code == 0, paused.err
    assert "paused stripe * (by alice)" in paused.out
    rows = [seed_event(conn, f"evt_{n}") for n in range(3)]
    for row_id in rows:
        _hold(conn, row_id)

    listed = cli("paused", "--json").json()["pauses"]
    assert [(p["provider"], p["event_type"], p["paused_by"], p["held"]) for p in listed] == [
        ("stripe", "*", "alice", 3)
    ]
    table = cli("paused")
    assert "vendor incident" in table.out
    status = cli("status")
    assert "paused:                   1 (holding 3 event(s))" in status.out
    assert "stripe *: by alice, 3 held" in status.out

    resumed = cli("resume", "stripe", "--operator", "bob")
    assert resumed.code == 0, resumed.err
    assert "3 held event(s) due again" in resumed.out
    due = conn.execute(
        "SELECT id FROM webhook_events WHERE available_at <= now() ORDER BY available_at, id"
    ).fetchall()
    assert [r[0] for r in due] == rows  # due at arrival, oldest first
    assert cli("paused").err.strip() == "nothing is paused"
    assert conn.execute("SELECT paused_by, resumed_by FROM handler_pauses").fetchall() == [
        ("alice", "bob")
    ]


def test_refusals_say_why_and_change_nothing(cli: Any, conn: psycopg.Connection[Any]) -> None:
    before = table_snapshot(conn)
    wrong = cli("pause", "stripe", "*.paid", "--reason", "r")
    assert wrong.code == 2
    assert "type '*.paid' is not an event type, a prefix ending in '*'" in wrong.err
    not_paused = cli("resume", "stripe", "invoice.paid")
    assert not_paused.code == 1
    assert "stripe invoice.paid is not paused" in not_paused.err
    with pytest.raises(SystemExit) as no_reason:  # argparse's usage error
        cli("pause", "stripe", "--reason", "   ")
    assert no_reason.value.code == 2
    assert table_snapshot(conn) == before

    assert cli("pause", "stripe", "invoice.*", "--reason", "r").code == 0
    twice = cli("pause", "stripe", "invoice.*", "--reason", "again")
    assert twice.code == 1
    assert "paused already" in twice.err
    # A pause is of exactly its key: resuming another key, or the whole provider, is refused.
    assert cli("resume", "stripe").code == 1
    assert len(cli("paused", "--json").json()["pauses"]) == 1
