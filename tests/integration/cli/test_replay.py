"""`webhook-inbox replay` against a real PostgreSQL and a moto queue."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from tests.integration.cli.conftest import Queue, seed_event, table_snapshot


def _row(conn: psycopg.Connection[Any], row_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT status, attempts, available_at <= now() AS due, enqueued_at, last_error,"
        " error_kind, lease_owner FROM webhook_events WHERE id = %s",
        (row_id,),
    )
    names = [c.name for c in cur.description or ()]
    row = cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def _actions(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT action, operator, reason, event_row_id, previous_status, previous_attempts,"
        " previous_error_kind, previous_last_error FROM operator_actions ORDER BY id"
    ).fetchall()


def test_replay_of_a_dead_letter_audits_resets_and_enqueues(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    row_id = seed_event(conn, "evt_dead", status="dead_letter", attempts=8, error="boom")

    result = cli(
        "replay", "stripe", "evt_dead", "--reason", "handler fixed in v2",
        "--operator", "alice", "--queue-url", queue.url,
    )  # fmt: skip

    assert result.code == 0, result.err
    assert "dead_letter" in result.out  # the current state is shown first
    row = _row(conn, row_id)
    assert row["status"] == "received"
    assert row["attempts"] == 0
    assert row["due"]
    assert row["enqueued_at"] is not None
    assert row["last_error"] is None
    assert _actions(conn) == [
        (
            "replay",
            "alice",
            "handler fixed in v2",
            row_id,
            "dead_letter",
            8,
            "handler_error",
            "boom",
        )
    ]
    assert queue.drain() == [{"id": row_id}]


def test_operator_defaults_to_user(cli: Any, conn: psycopg.Connection[Any], queue: Queue) -> None:
    seed_event(conn, "evt_1", status="failed", attempts=2)
    assert cli("replay", "stripe", "evt_1", "--reason", "r", "--queue-url", queue.url).code == 0
    assert _actions(conn)[0][1] == "test-operator"


def test_replay_is_refused_under_a_live_lease(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    row_id = seed_event(conn, "evt_busy", status="processing", attempts=1, lease_seconds=120)
    before = table_snapshot(conn)

    result = cli("replay", "stripe", "evt_busy", "--reason", "r", "--queue-url", queue.url)

    assert result.code == 1
    assert "live lease" in result.out
    assert table_snapshot(conn) == before
    assert _row(conn, row_id)["lease_owner"] == "worker-1"
    assert queue.drain() == []


def test_replay_of_an_expired_lease_is_allowed(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    row_id = seed_event(conn, "evt_stuck", status="processing", attempts=3, lease_seconds=-5)
    result = cli("replay", "stripe", "evt_stuck", "--reason", "r", "--queue-url", queue.url)
    assert result.code == 0, result.out + result.err
    assert _row(conn, row_id)["status"] == "received"
    assert queue.drain() == [{"id": row_id}]


def test_replay_is_refused_while_a_worker_holds_the_row_lock(
    cli: Any, conn: psycopg.Connection[Any], database_url: str, queue: Queue
) -> None:
    """A processor mid-transaction holds the row: replay reports it busy instead of waiting."""
    row_id = seed_event(conn, "evt_locked", status="failed", attempts=1)
    locked, release = threading.Event(), threading.Event()

    def worker() -> None:
        with psycopg.connect(database_url) as own, own.transaction():
            own.execute("SELECT 1 FROM webhook_events WHERE id = %s FOR UPDATE", (row_id,))
            locked.set()
            release.wait(timeout=30)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert locked.wait(timeout=10)
        result = cli("replay", "stripe", "evt_locked", "--reason", "r", "--queue-url", queue.url)
    finally:
        release.set()
        thread.join(timeout=10)
    assert result.code == 1
    assert "locked" in result.out
    assert _row(conn, row_id)["status"] == "failed"
    assert _actions(conn) == []


def test_dry_run_writes_and_sends_nothing(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    seed_event(conn, "evt_a", status="dead_letter", attempts=8, error="boom")
    seed_event(conn, "evt_b", status="dead_letter", attempts=8, error="boom")
    before = table_snapshot(conn)

    result = cli(
        "replay", "--status", "dead_letter", "--reason", "r", "--dry-run", "--queue-url", queue.url
    )

    assert result.code == 0, result.err
    assert result.out.count("would_replay") == 2
    assert "nothing was written" in result.err
    assert table_snapshot(conn) == before
    assert queue.drain() == []


def test_filtered_replay_declined_writes_nothing(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    seed_event(conn, "evt_a", status="dead_letter", attempts=8)
    before = table_snapshot(conn)

    result = cli(
        "replay", "--status", "dead_letter", "--reason", "r", "--queue-url", queue.url, stdin="n\n"
    )

    assert result.code == 1
    assert "aborted" in result.err
    assert table_snapshot(conn) == before
    assert queue.drain() == []


def test_filtered_replay_without_an_answer_is_declined(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    seed_event(conn, "evt_a", status="dead_letter", attempts=8)
    before = table_snapshot(conn)
    result = cli("replay", "--status", "dead_letter", "--reason", "r", "--queue-url", queue.url)
    assert result.code == 1
    assert table_snapshot(conn) == before


def test_filtered_replay_confirmed_touches_only_the_matching_rows(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    wanted = [seed_event(conn, f"evt_{i}", status="dead_letter", attempts=8) for i in range(3)]
    other_provider = seed_event(conn, "gh_1", provider="github", status="dead_letter", attempts=8)
    processed = seed_event(conn, "evt_done", status="processed", attempts=1)

    result = cli(
        "replay", "--status", "dead_letter", "--provider", "stripe",
        "--reason", "outage over", "--queue-url", queue.url, stdin="y\n",
    )  # fmt: skip

    assert result.code == 0, result.err
    assert [_row(conn, i)["status"] for i in wanted] == ["received"] * 3
    assert _row(conn, other_provider)["status"] == "dead_letter"
    assert _row(conn, processed)["status"] == "processed"
    assert sorted(b["id"] for b in queue.drain()) == wanted
    assert len(_actions(conn)) == 3


def test_yes_skips_the_question(cli: Any, conn: psycopg.Connection[Any], queue: Queue) -> None:
    row_id = seed_event(conn, "evt_a", status="dead_letter", attempts=8)
    result = cli(
        "replay", "--status", "dead_letter", "--reason", "r", "--yes", "--queue-url", queue.url
    )
    assert result.code == 0
    assert _row(conn, row_id)["status"] == "received"


def test_replay_without_a_queue_leaves_the_row_for_the_sweeper(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    row_id = seed_event(conn, "evt_a", status="dead_letter", attempts=8)
    result = cli("replay", "stripe", "evt_a", "--reason", "r")
    assert result.code == 0
    assert "sweeper" in result.err
    row = _row(conn, row_id)
    assert row["status"] == "received"
    assert row["enqueued_at"] is None


def test_a_failed_send_keeps_the_replay_and_says_the_sweeper_will_send_it(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    row_id = seed_event(conn, "evt_a", status="dead_letter", attempts=8)
    missing_queue = queue.url.rsplit("/", 1)[0] + "/no-such-queue"

    result = cli("replay", "stripe", "evt_a", "--reason", "r", "--queue-url", missing_queue)

    assert result.code == 0
    assert "send failed" in result.err
    assert "sweeper will enqueue" in result.err
    row = _row(conn, row_id)
    assert row["status"] == "received"
    assert row["enqueued_at"] is None  # so the sweeper's claim_due_for_enqueue picks it up
    assert len(_actions(conn)) == 1


def test_unknown_event_ids_are_reported_and_the_rest_replayed(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    row_id = seed_event(conn, "evt_a", status="dead_letter", attempts=8)
    result = cli(
        "replay", "stripe", "evt_a", "evt_nope", "--reason", "r", "--queue-url", queue.url,
        "--json",
    )  # fmt: skip
    assert result.code == 1
    outcomes = {o["label"]: o["outcome"] for o in result.json()["outcomes"]}
    assert outcomes == {"stripe/evt_a": "replayed", "stripe/evt_nope": "not_found"}
    assert queue.drain() == [{"id": row_id}]


def test_replay_needs_targets_or_filters_and_not_both(cli: Any) -> None:
    assert cli("replay", "--reason", "r").code == 2
    assert cli("replay", "stripe", "--reason", "r").code == 2
    assert cli("replay", "stripe", "e1", "--status", "failed", "--reason", "r").code == 2


def test_payload_purged_rows_are_refused(
    cli: Any, conn: psycopg.Connection[Any], queue: Queue
) -> None:
    row_id = seed_event(conn, "evt_old", status="processed", attempts=1)
    conn.execute(
        "UPDATE webhook_events SET payload = NULL, payload_purged_at = now() WHERE id = %s",
        (row_id,),
    )
    result = cli("replay", "stripe", "evt_old", "--reason", "r", "--queue-url", queue.url)
    assert result.code == 1
    assert "purged" in result.out
    assert _row(conn, row_id)["status"] == "processed"


def test_replay_takes_the_delivery_id_the_provider_shows(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    """GitHub's row is keyed by a digest of type and body: the delivery id that `trigger`,
    `events list` and GitHub's own page show replays it too."""
    key = "9f2c" * 16
    row_id = seed_event(conn, key, provider="github", event_type="push", status="dead_letter")
    conn.execute("UPDATE webhook_events SET delivery_id = 'd-7' WHERE id = %s", (row_id,))

    result = cli("replay", "github", "d-7", "--reason", "by the id GitHub shows", "--json")

    assert result.code == 0, result.err
    assert _row(conn, row_id)["status"] == "received"
    assert f"delivery id d-7 is event {key}" in result.out + result.err


def test_replay_by_a_delivery_id_naming_two_events_replays_neither_and_lists_them(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    rows = []
    for key, event_type in (("a" * 64, "push"), ("b" * 64, "issues")):
        rows.append(seed_event(conn, key, provider="github", event_type=event_type))
        conn.execute("UPDATE webhook_events SET delivery_id = 'd-1' WHERE id = %s", (rows[-1],))

    result = cli("replay", "github", "d-1", "--reason", "ambiguous")

    assert result.code != 0
    assert "names 2 events" in result.out + result.err
    assert f"webhook-inbox replay github {'a' * 64}" in result.out + result.err
    assert all(_row(conn, r)["status"] == "received" for r in rows)  # untouched
    assert _actions(conn) == []
