"""The sweeper makes the switch to the partitioned inbox over its runs (after migration 0010),
waits no longer than a claim would for a busy inbox, and then keeps partitions ahead."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.integration.maintenance.conftest import Aws, RecordingEvents, claim, make_sweep
from webhook_inbox.store import migrate, partitions


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
        assert partitions.switch_state(conn).next_step == "prepare"  # as it was
        writer.commit()

        waiting = make_sweep(conn, aws, events).run()

        # Every step but the switch itself, which waits for the release that applied 0010 to
        # have been in place for a day (the release before's claim fails on partitions).
        assert waiting.errors == []
        assert not waiting.partitions_switched
        assert waiting.completed_steps[-1] == "partition_switch"
        assert partitions.switch_state(conn).next_step == "switch"
        assert not partitions.is_partitioned(conn)
        _applied_a_day_ago(conn)

        switched = make_sweep(conn, aws, events).run()

        assert switched.partitions_switched
        assert switched.errors == []
        assert switched.completed_steps[-1] == "partition_switch"
        assert partitions.is_partitioned(conn)
        # The rows stored before stay, in the old table's partition, found by their keys.
        assert inbox_row_of(conn, "evt_before") == stored
        assert claim(conn, "evt_in_flight") == inbox_row_of(conn, "evt_in_flight")

        after = make_sweep(conn, aws, events).run()

        # Today and tomorrow came with the switch; the rest of the week now.
        assert after.partitions_created == 6
        assert not after.partitions_switched
        assert after.completed_steps[0] == "partitions_ahead"


def inbox_row_of(conn: psycopg.Connection[Any], event_id: str) -> int:
    row = conn.execute(
        "SELECT event_row_id FROM webhook_event_keys WHERE provider = 'stripe' AND event_id = %s",
        (event_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _applied_a_day_ago(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "UPDATE schema_migrations SET applied_at = now() - make_interval(hours => %s)"
        " WHERE version = '0010'",
        (partitions.RELEASE_SETTLE_HOURS,),
    )
