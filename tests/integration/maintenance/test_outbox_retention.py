"""Retention of the partitioned outbox by the sweeper: a day's partition goes whole once every
message in it is published and past the key retention; a day a dead message keeps stays (its
published messages go row by row); two overlapping runs both finish."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from tests.integration.maintenance.conftest import Aws, RecordingEvents, make_sweep
from tests.outbox_days import old_outbox_day
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.store import db, partitions
from webhook_inbox.store.partitions import OUTBOX


def _outbox_partitions(conn: psycopg.Connection[Any]) -> set[str]:
    return {p.name for p in partitions.partitions(conn, OUTBOX) if p.attached}


def test_a_published_day_goes_whole_and_a_day_with_a_dead_message_stays(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    published = old_outbox_day(conn, 95, ["published"] * 7).name
    dead = old_outbox_day(conn, 93, ["published", "published", "dead"]).name
    recent = old_outbox_day(conn, 80, ["published"]).name

    report = make_sweep(conn, aws, events, key_retention_days=90).run()

    assert report.errors == []
    assert published not in _outbox_partitions(conn)
    assert {dead, recent} <= _outbox_partitions(conn)
    # The dropped day's 7 keys and the kept day's 2 published messages (row by row).
    assert report.outbox_deleted == 7 + 2
    assert report.partitions_kept == 1
    left = conn.execute("SELECT deduplication_key, status FROM outbox_messages ORDER BY 1")
    assert left.fetchall() == [("k_80_0", "published"), ("k_93_2", "dead")]
    keys = conn.execute("SELECT deduplication_key FROM outbox_message_keys ORDER BY 1")
    assert keys.fetchall() == [("k_80_0",), ("k_93_2",)]


def test_two_overlapping_runs_retire_the_same_partitions_without_failing(
    conn: psycopg.Connection[Any], database_url: str, aws: Aws, events: RecordingEvents
) -> None:
    days = [old_outbox_day(conn, 100 + n, ["published"] * 50).name for n in range(4)]
    barrier = threading.Barrier(2)

    def sweep(_: int) -> SweepReport:
        with db.connect(database_url) as own:
            barrier.wait()
            return make_sweep(own, aws, events, key_retention_days=90, retention_batch=10).run()

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(sweep, range(2)))

    # Busy notes are allowed (the other run held the partitions' lock past the claim's wait:
    # that run goes on, the next one takes what is left); nothing else.
    for report in reports:
        assert all("was busy" in error for error in report.errors), report.errors
    last = make_sweep(conn, aws, events, key_retention_days=90).run()
    assert last.errors == []
    assert not set(days) & _outbox_partitions(conn)
    # Each partition dropped once: the four days, and the two old tables (empty in a database
    # created partitioned).
    assert sum(r.partitions_dropped for r in [*reports, last]) == len(days) + 2
    assert conn.execute("SELECT count(*) FROM outbox_message_keys").fetchone() == (0,)
