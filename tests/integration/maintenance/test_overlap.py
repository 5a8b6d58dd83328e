"""Schedules may fire twice: two sweeps at once still send and publish every row exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import psycopg

from tests.integration.maintenance.conftest import (
    REGION,
    Aws,
    RecordingEvents,
    insert_pending_outbox,
    insert_received,
    make_config,
)
from tests.support import FakeLambdaContext
from webhook_inbox.maintenance.publishers import EventBridgePublisher
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.maintenance.sweeper import Sweep
from webhook_inbox.store import db


def test_two_overlapping_sweeps_send_and_publish_each_row_exactly_once(
    conn: psycopg.Connection[Any], database_url: str, aws: Aws
) -> None:
    row_ids = insert_received(conn, 1_000)
    keys = insert_pending_outbox(conn, 1_000)
    events = RecordingEvents()
    # Small batches so that the two runs interleave many times instead of one taking it all.
    config = make_config(aws.queue_url, enqueue_batch=20, outbox_batch=20)
    barrier = threading.Barrier(2)

    def sweep(_: int) -> SweepReport:
        # Each run has its own connection and clients, as two Lambda environments would.
        with db.connect(database_url) as own:
            run = Sweep(
                own,
                config,
                sqs=boto3.client("sqs", region_name=REGION),
                publisher=EventBridgePublisher(events, event_bus_name="default"),
                remaining_ms=FakeLambdaContext().get_remaining_time_in_millis,
            )
            barrier.wait(timeout=30)
            return run.run()

    with ThreadPoolExecutor(max_workers=2) as pool:
        first, second = pool.map(sweep, range(2))

    sent = Counter(aws.queued_ids())
    assert len(sent) == 1_000
    assert set(sent) == set(row_ids)
    assert set(sent.values()) == {1}
    published = Counter(events.published_keys())
    assert set(published) == set(keys)
    assert set(published.values()) == {1}

    assert first.reenqueued + second.reenqueued == 1_000
    assert first.outbox_published + second.outbox_published == 1_000
    facts = conn.execute(
        "SELECT (SELECT count(*) FROM webhook_events WHERE enqueued_at IS NULL),"
        " (SELECT count(*) FROM outbox_messages WHERE status <> 'published' OR attempts <> 1)"
    ).fetchone()
    assert facts == (0, 0)
