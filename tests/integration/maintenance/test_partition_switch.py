"""The sweeper makes the switches to the partitioned inbox and outbox over its runs (after
migrations 0010 and 0013), waits no longer than a claim would for a busy table, and then keeps
partitions ahead for both."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.integration.maintenance.conftest import Aws, RecordingEvents, claim, make_sweep
from webhook_inbox.store import migrate, outbox, partition_switch, partitions


def test_the_sweeper_switches_the_inbox_and_tries_again_when_it_was_busy(
    empty_database_url: str, aws: Aws, events: RecordingEvents
) -> None:
    url = empty_database_url
    with psycopg.connect(url) as setup:
        migrate.migrate(setup)
        migrate.migrate(setup, package="webhook_inbox_app")
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url) as writer:
        stored = claim(conn, "evt_before")
        claim(writer, "evt_in_flight")  # a claim's transaction, still open: the inbox is busy

        busy = make_sweep(conn, aws, events).run()

        assert busy.errors == ["partition_switch: the inbox was busy; the switch goes on next run"]
        assert "partition_switch" not in busy.completed_steps
        assert not busy.partitions_switched
        assert partition_switch.switch_state(conn).next_step == "prepare"  # as it was
        writer.commit()

        waiting = make_sweep(conn, aws, events).run()

        # Every step but the switch itself, which waits for the release that applied 0010 to
        # have been in place for a day (the release before's claim fails on partitions).
        assert waiting.errors == []
        assert not waiting.partitions_switched
        assert waiting.completed_steps[-1] == "partition_switch"
        assert partition_switch.switch_state(conn).next_step == "switch"
        assert not partitions.is_partitioned(conn)
        _applied_a_day_ago(conn, "0010", "0013")

        switched = make_sweep(conn, aws, events).run()

        assert switched.partitions_switched
        assert switched.errors == []
        assert switched.completed_steps[-1] == "partition_switch"
        assert partitions.is_partitioned(conn)
        assert partitions.is_partitioned(conn, partitions.OUTBOX)  # the outbox's, in the same run
        # The rows stored before stay, in the old table's partition, found by their keys.
        assert inbox_row_of(conn, "evt_before") == stored
        assert claim(conn, "evt_in_flight") == inbox_row_of(conn, "evt_in_flight")

        after = make_sweep(conn, aws, events).run()

        # Today and tomorrow came with each switch; the rest of the week now, for both tables.
        assert after.partitions_created == 2 * 6
        assert not after.partitions_switched
        assert after.completed_steps[0] == "partitions_ahead"


def test_a_busy_outbox_is_switched_on_a_later_run_and_loses_no_message(
    empty_database_url: str, aws: Aws, events: RecordingEvents
) -> None:
    url = empty_database_url
    with psycopg.connect(url) as setup:
        migrate.migrate(setup)
        migrate.migrate(setup, package="webhook_inbox_app")
    with psycopg.connect(url, autocommit=True) as conn, psycopg.connect(url) as writer:
        assert partition_switch.switch_to_partitions(conn)  # the inbox's
        outbox.add_message(
            conn, topic="t", deduplication_key="before", payload={}, source_event_id=None
        )
        # A processor's transaction that queued a message and has not committed yet.
        outbox.add_message(
            writer, topic="t", deduplication_key="in_flight", payload={}, source_event_id=None
        )

        busy = make_sweep(conn, aws, events).run()

        assert busy.errors == ["partition_switch: the outbox was busy; the switch goes on next run"]
        assert partition_switch.switch_state(conn, partitions.OUTBOX).next_step == "prepare"
        writer.commit()

        waiting = make_sweep(conn, aws, events).run()

        # Every step but the switch itself, until 0013 has been applied for a day (the release
        # before's add_message fails on the partitioned outbox).
        assert waiting.errors == []
        assert not waiting.partitions_switched
        assert partition_switch.switch_state(conn, partitions.OUTBOX).next_step == "switch"
        _applied_a_day_ago(conn, "0013")

        switched = make_sweep(conn, aws, events).run()

        assert switched.partitions_switched
        assert switched.errors == []
        assert partitions.is_partitioned(conn, partitions.OUTBOX)
        keys = conn.execute(
            "SELECT m.deduplication_key FROM outbox_messages m JOIN outbox_message_keys k"
            " ON k.message_id = m.id AND k.deduplication_key = m.deduplication_key"
            " ORDER BY 1"
        ).fetchall()
        assert keys == [("before",), ("in_flight",)]  # both kept, each with its key
        for key in ("before", "in_flight"):  # and both still deduplicated
            again = outbox.add_message(
                conn, topic="t", deduplication_key=key, payload={}, source_event_id=None
            )
            assert again is False


def inbox_row_of(conn: psycopg.Connection[Any], event_id: str) -> int:
    row = conn.execute(
        "SELECT event_row_id FROM webhook_event_keys WHERE provider = 'stripe' AND event_id = %s",
        (event_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _applied_a_day_ago(conn: psycopg.Connection[Any], *versions: str) -> None:
    conn.execute(
        "UPDATE schema_migrations SET applied_at = now() - make_interval(hours => %s)"
        " WHERE version = ANY(%s)",
        (partition_switch.RELEASE_SETTLE_HOURS, list(versions)),
    )
