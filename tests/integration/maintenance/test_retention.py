"""Step 4: payloads go after PAYLOAD_RETENTION_DAYS, keys after KEY_RETENTION_DAYS."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.integration.maintenance.conftest import (
    Aws,
    RecordingEvents,
    claim,
    insert_received,
    make_sweep,
    make_terminal,
)
from webhook_inbox.store import inbox, inbox_upkeep, partitions


def _payload_state(conn: psycopg.Connection[Any], row_id: int) -> tuple[bool, bool]:
    row = conn.execute(
        "SELECT payload IS NOT NULL, payload_purged_at IS NOT NULL FROM webhook_events"
        " WHERE id = %s",
        (row_id,),
    ).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


def _exists(conn: psycopg.Connection[Any], row_id: int) -> bool:
    row = conn.execute("SELECT 1 FROM webhook_events WHERE id = %s", (row_id,)).fetchone()
    return row is not None


def _stored_days_ago(conn: psycopg.Connection[Any], event_id: str, days_ago: int) -> int:
    """A received event stored ``days_ago`` days ago: its row in that day's partition (ids
    carry their day), its key by the keys' trigger."""
    day = datetime.now(UTC).date() - timedelta(days=days_ago)
    partitions.create_ahead(conn, days=0, today=day)
    low = partitions.day_partition(day).low
    row = conn.execute(
        "INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256, payload,"
        " received_at) VALUES (%s + nextval('webhook_event_ids'), 'stripe', %s,"
        " 'customer.created', sha256(%s::bytea), '{}', now() - %s * interval '1 day')"
        " RETURNING id",
        (low, event_id, event_id.encode(), days_ago),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _redeliver(conn: psycopg.Connection[Any], event_id: str) -> inbox.ClaimResult:
    payload = {"id": event_id}
    return inbox.claim_event(
        conn,
        provider="stripe",
        event_id=event_id,
        event_type="customer.created",
        body_sha256=hashlib.sha256(json.dumps(payload).encode()).digest(),
        payload=payload,
    )


def test_payloads_of_old_terminal_rows_go_and_a_late_duplicate_is_still_recognised(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    old_processed = claim(conn, "evt_old", payload={"card": "4242-secret"})
    old_ignored = claim(conn, "evt_old_ignored")
    old_dead = claim(conn, "evt_old_dead")
    recent = claim(conn, "evt_recent")
    old_failed = claim(conn, "evt_old_failed")
    make_terminal(conn, old_processed, "processed", days_ago=31)
    make_terminal(conn, old_ignored, "ignored", days_ago=31)
    make_terminal(conn, old_dead, "dead_letter", days_ago=31)
    make_terminal(conn, recent, "processed", days_ago=29)
    conn.execute(
        "UPDATE webhook_events SET status = 'failed', updated_at = now() - interval '31 days'"
        " WHERE id = %s",
        (old_failed,),
    )
    updated_before = conn.execute(
        "SELECT updated_at FROM webhook_events WHERE id = %s", (old_processed,)
    ).fetchone()

    report = make_sweep(conn, aws, events, payload_retention_days=30).run()

    assert report.payloads_purged == 2
    assert _payload_state(conn, old_processed) == (False, True)
    assert _payload_state(conn, old_ignored) == (False, True)
    assert _payload_state(conn, old_dead) == (True, False)  # a replay still needs it
    assert _payload_state(conn, recent) == (True, False)
    assert _payload_state(conn, old_failed) == (True, False)  # not finished: never purged
    # The key-retention clock still runs from the last transition, not from the purge.
    assert (
        conn.execute(
            "SELECT updated_at FROM webhook_events WHERE id = %s", (old_processed,)
        ).fetchone()
        == updated_before
    )

    late = _redeliver(conn, "evt_old")
    assert (late.is_new, late.id, late.status, late.delivery_count) == (
        False,
        old_processed,
        "processed",
        2,
    )


def test_old_keys_and_published_outbox_rows_go_after_the_key_retention(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    # Retention goes a day's partition at a time: the rows of 92 days ago are all terminal and
    # unchanged for 91 days; the day of 89 days ago is within the retention; the day of 95
    # days ago holds a row never finished.
    expired = _stored_days_ago(conn, "evt_expired", 92)
    expired_dead = _stored_days_ago(conn, "evt_expired_dead", 92)
    kept = _stored_days_ago(conn, "evt_kept", 89)
    stuck = _stored_days_ago(conn, "evt_stuck", 95)  # received long ago, not terminal
    make_terminal(conn, expired, "processed", days_ago=91)
    make_terminal(conn, expired_dead, "dead_letter", days_ago=91)
    make_terminal(conn, kept, "processed", days_ago=89)
    conn.execute(
        "INSERT INTO webhook_event_attempts (event_row_id, attempt, started_at, ended_at,"
        " outcome) VALUES (%s, 1, now() - interval '91 days', now() - interval '91 days',"
        " 'failed')",
        (expired_dead,),
    )
    conn.execute(
        "UPDATE webhook_events SET updated_at = now() - interval '91 days', enqueued_at = now()"
        " WHERE id = %s",
        (stuck,),
    )
    conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload, source_event_id, status,"
        " published_at, created_at) VALUES"
        " ('t', 'old-published', '{}', %(e)s, 'published', now(), now() - interval '91 days'),"
        " ('t', 'new-published', '{}', %(e)s, 'published', now(), now() - interval '10 days'),"
        " ('t', 'old-dead', '{}', NULL, 'dead', NULL, now() - interval '91 days')",
        {"e": expired},
    )
    conn.execute(
        "INSERT INTO operator_actions (action, operator, reason, event_row_id)"
        " VALUES ('replay', 'ops', 'test', %s)",
        (expired,),
    )

    report = make_sweep(conn, aws, events, payload_retention_days=30, key_retention_days=90).run()

    assert (report.events_deleted, report.outbox_deleted) == (2, 1)
    # The day's partition, and the two old tables' (the inbox's and the outbox's, empty in a
    # database created partitioned).
    assert (report.partitions_dropped, report.partitions_kept) == (3, 1)
    assert conn.execute("SELECT count(*) FROM webhook_event_attempts").fetchone() == (0,)
    assert not _exists(conn, expired)
    assert not _exists(conn, expired_dead)
    assert _exists(conn, kept)
    assert _exists(conn, stuck)
    outbox_left = conn.execute(
        "SELECT deduplication_key, source_event_id FROM outbox_messages ORDER BY id"
    ).fetchall()
    assert outbox_left == [("new-published", None), ("old-dead", None)]
    action = conn.execute("SELECT event_row_id FROM operator_actions").fetchone()
    assert action == (None,)
    # Past the key retention a redelivery is new again: which is why the default (90 days)
    # outlasts every provider's retry and redelivery window.
    assert _redeliver(conn, "evt_expired").is_new


def test_rows_stored_before_the_switch_go_row_by_row_with_their_keys(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    # Ids below 2^32: the old table's partition, which holds every row stored before the switch
    # (a day's partition cannot be dropped for them).
    rows = conn.execute(
        "INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256, payload)"
        " SELECT g, 'stripe', 'evt_old_' || g, 'customer.created', sha256(g::text::bytea), '{}'"
        " FROM generate_series(1, 3) AS g RETURNING id"
    ).fetchall()
    old, recent, unfinished = (r[0] for r in rows)
    make_terminal(conn, old, "processed", days_ago=91)
    make_terminal(conn, recent, "ignored", days_ago=10)
    conn.execute(
        "UPDATE webhook_events SET updated_at = now() - interval '91 days' WHERE id = %s",
        (unfinished,),
    )
    conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload, source_event_id)"
        " VALUES ('t', 'from-old', '{}', %s)",
        (old,),
    )

    report = make_sweep(conn, aws, events, key_retention_days=90).run()

    assert report.events_deleted == 1
    # The inbox's old table's partition still holds rows (the outbox's, empty, went).
    assert "webhook_events_legacy" in {p.name for p in partitions.partitions(conn)}
    assert report.partitions_dropped == 1
    assert (_exists(conn, old), _exists(conn, recent), _exists(conn, unfinished)) == (
        False,
        True,
        True,
    )
    keys = conn.execute(
        "SELECT event_id FROM webhook_event_keys WHERE event_id LIKE 'evt_old_%%' ORDER BY 1"
    ).fetchall()
    assert keys == [("evt_old_2",), ("evt_old_3",)]
    assert conn.execute("SELECT source_event_id FROM outbox_messages").fetchall() == [(None,)]


def test_a_kept_days_finished_rows_go_row_by_row_and_a_day_not_wholly_past_stays_whole(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    # The day of 95 days ago is kept whole by an event still owed processing; its finished
    # rows past the retention go row by row (with their keys and attempts), as the outbox's
    # published messages of a kept day do. The day of 90 days ago is not yet wholly past the
    # 90-day retention: its partition goes whole tomorrow, so nothing in it goes row by row
    # today, not even a row past the retention.
    stuck = _stored_days_ago(conn, "evt_stuck", 95)
    finished = _stored_days_ago(conn, "evt_finished", 95)
    conn.execute(
        "UPDATE webhook_events SET updated_at = now() - interval '95 days' WHERE id = %s",
        (stuck,),
    )
    make_terminal(conn, finished, "processed", days_ago=94)
    conn.execute(
        "INSERT INTO webhook_event_attempts (event_row_id, attempt, started_at, ended_at,"
        " outcome) VALUES (%s, 1, now() - interval '94 days', now() - interval '94 days',"
        " 'failed')",
        (finished,),
    )
    conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload, source_event_id)"
        " VALUES ('t', 'from-finished', '{}', %s)",
        (finished,),
    )
    tomorrows = _stored_days_ago(conn, "evt_tomorrows", 90)
    make_terminal(conn, tomorrows, "processed", days_ago=90)
    conn.execute(
        "UPDATE webhook_events SET updated_at = updated_at - interval '1 minute' WHERE id = %s",
        (tomorrows,),
    )

    report = make_sweep(conn, aws, events, key_retention_days=90).run()

    assert report.partitions_kept == 1
    assert report.events_deleted == 1
    assert (_exists(conn, stuck), _exists(conn, finished), _exists(conn, tomorrows)) == (
        True,
        False,
        True,
    )
    keys = conn.execute(
        "SELECT event_id FROM webhook_event_keys WHERE event_id LIKE 'evt_%%' ORDER BY 1"
    ).fetchall()
    assert keys == [("evt_stuck",), ("evt_tomorrows",)]
    attempts = conn.execute(
        "SELECT count(*) FROM webhook_event_attempts WHERE event_row_id = %s", (finished,)
    ).fetchone()
    assert attempts == (0,)
    assert conn.execute("SELECT source_event_id FROM outbox_messages").fetchall() == [(None,)]


def test_retention_works_in_bounded_batches(
    conn: psycopg.Connection[Any],
    aws: Aws,
    events: RecordingEvents,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = insert_received(conn, 1_200)
    conn.execute(
        "UPDATE webhook_events SET status = 'processed', processed_at = now(),"
        " updated_at = now() - interval '40 days' WHERE id = ANY(%s)",
        (ids,),
    )
    batches: list[int] = []
    original = inbox_upkeep.purge_payloads

    def recording(*args: Any, **kwargs: Any) -> int:
        purged = original(*args, **kwargs)
        batches.append(purged)
        return purged

    monkeypatch.setattr(inbox_upkeep, "purge_payloads", recording)

    report = make_sweep(conn, aws, events, retention_batch=500).run()

    assert batches == [500, 500, 200]
    assert report.payloads_purged == 1_200


def test_retention_skips_a_row_locked_elsewhere_instead_of_waiting(
    conn: psycopg.Connection[Any], database_url: str, aws: Aws, events: RecordingEvents
) -> None:
    locked, free = claim(conn, "evt_locked"), claim(conn, "evt_free")
    make_terminal(conn, locked, "processed", days_ago=31)
    make_terminal(conn, free, "processed", days_ago=31)

    # A sweep that waited for the lock would fail at this lock timeout (the lock is released
    # only after it returns): judged by what it did, not by a wall clock a busy machine bends.
    conn.execute("SET lock_timeout = '10s'")
    with psycopg.connect(database_url) as other:  # e.g. an operator replaying it right now
        other.execute("SELECT 1 FROM webhook_events WHERE id = %s FOR UPDATE", (locked,))
        report = make_sweep(conn, aws, events).run()
        other.rollback()

    assert report.payloads_purged == 1
    assert _payload_state(conn, free) == (False, True)
    assert _payload_state(conn, locked) == (True, False)

    assert make_sweep(conn, aws, events).run().payloads_purged == 1
    assert _payload_state(conn, locked) == (False, True)
