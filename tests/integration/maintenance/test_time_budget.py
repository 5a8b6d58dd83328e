"""The run stops between batches while a safety margin is left, and leaves the rest for later."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from tests.integration.maintenance.conftest import (
    Aws,
    RecordingEvents,
    claim,
    insert_pending_outbox,
    insert_received,
    make_sweep,
)
from tests.support import FakeLambdaContext
from webhook_inbox.store import inbox, inbox_upkeep


class ClockedSqs:
    """Forwards to moto; after each call lets ``on_call(calls)`` move the Lambda's clock."""

    def __init__(self, real: Any, on_call: Any) -> None:
        self._real = real
        self._on_call = on_call
        self.calls = 0

    def send_message_batch(self, **kwargs: Any) -> Any:
        self.calls += 1
        answer = self._real.send_message_batch(**kwargs)
        self._on_call(self.calls)
        return answer


def _pending_untouched_outbox(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM outbox_messages WHERE status = 'pending' AND attempts = 0"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_sweep_started_with_too_little_time_does_nothing_and_leaves_everything(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    insert_received(conn, 5)
    insert_pending_outbox(conn, 5)

    report = make_sweep(conn, aws, events, context=FakeLambdaContext(remaining_ms=3_000)).run()

    assert report.stopped_early_at == "partitions_ahead"  # the first step
    assert report.completed_steps == []
    assert report.backlog is None  # not even the measurement fits in 3 s
    assert aws.queued_ids() == []
    assert events.entries == []
    assert _pending_untouched_outbox(conn) == 5

    later = make_sweep(conn, aws, events).run()
    assert (later.reenqueued, later.outbox_published) == (5, 5)


def test_time_running_out_after_a_batch_stops_the_run_and_the_next_run_finishes(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 250)
    insert_pending_outbox(conn, 5)
    context = FakeLambdaContext(remaining_ms=60_000)

    def after_first_batch(calls: int) -> None:
        if calls == 10:  # ten SendMessageBatch calls = the first batch of 100 rows
            context.remaining_ms = 9_000

    sqs = ClockedSqs(aws.sqs, after_first_batch)
    report = make_sweep(conn, aws, events, context=context, sqs=sqs, enqueue_batch=100).run()

    assert report.reenqueued == 100
    assert report.stopped_early_at == "reenqueue"
    assert report.completed_steps == ["partitions_ahead", "expire_leases", "paused_events"]
    assert _pending_untouched_outbox(conn) == 5  # the outbox step never started
    assert report.backlog is not None  # the measurement fits in what is left
    assert report.backlog.event_counts["received"] == 250
    left = conn.execute("SELECT count(*) FROM webhook_events WHERE enqueued_at IS NULL").fetchone()
    assert left == (150,)

    context.remaining_ms = 60_000
    later = make_sweep(conn, aws, events, context=context).run()
    assert later.stopped_early_at is None
    assert later.reenqueued == 150
    assert sorted(aws.queued_ids()) == sorted(ids)  # each row sent once over the two runs


def test_time_running_out_inside_a_batch_sends_no_more_and_keeps_the_rest_due(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    insert_received(conn, 100)
    context = FakeLambdaContext(remaining_ms=60_000)

    def after_third_call(calls: int) -> None:
        if calls == 3:
            context.remaining_ms = 9_000

    report = make_sweep(
        conn, aws, events, context=context, sqs=ClockedSqs(aws.sqs, after_third_call)
    ).run()

    assert report.reenqueued == 30
    assert report.stopped_early_at == "reenqueue"
    sent = conn.execute(
        "SELECT count(*) FROM webhook_events WHERE enqueued_at IS NOT NULL"
    ).fetchone()
    assert sent == (30,)
    assert len(aws.queued_ids()) == 30


def test_the_next_batch_is_not_started_when_it_could_not_finish_in_time(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    insert_received(conn, 300)
    # 10.3 s left, 10 s margin: room for a batch only if batches take under 0.3 s. Each call
    # here takes at least 50 ms, so a batch of ten takes at least 0.5 s: one batch, then stop.
    context = FakeLambdaContext(remaining_ms=10_300)

    def slow(calls: int) -> None:
        time.sleep(0.05)

    report = make_sweep(
        conn, aws, events, context=context, sqs=ClockedSqs(aws.sqs, slow), enqueue_batch=100
    ).run()

    assert report.reenqueued == 100
    assert report.stopped_early_at == "reenqueue"


def test_a_failed_row_brought_back_by_lease_expiry_waits_if_time_is_short(
    conn: psycopg.Connection[Any],
    aws: Aws,
    events: RecordingEvents,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Step order matters: with time for one step only, leases are recovered first.
    row_id = claim(conn, "evt_1")
    inbox.lease_events(conn, [row_id], owner="w", lease_seconds=60)
    conn.execute("UPDATE webhook_events SET lease_expires_at = now() - interval '1 second'")
    context = FakeLambdaContext(remaining_ms=60_000)
    sweep = make_sweep(conn, aws, events, context=context)
    original = inbox_upkeep.expire_leases

    def expire_then_run_out(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        context.remaining_ms = 9_000
        return result

    monkeypatch.setattr(inbox_upkeep, "expire_leases", expire_then_run_out)
    report = sweep.run()

    assert report.leases_expired == 1
    assert report.reenqueued == 0
    assert report.stopped_early_at == "paused_events"  # the steps after it never started
    assert aws.queued_ids() == []
