"""The stale rule re-sends lost wake-ups only, not the backlog waiting in a long queue.

Issue 14, suspected item 2 (confirmed): a row sent to SQS more than 15 minutes ago and still
``received`` was taken to have lost its message and was sent again. When the queue itself is
more than 15 minutes long (processors throttled or down), every waiting row got a second
message, then a third 15 minutes later: the queue grew by its own length every 15 minutes.
Now the sweeper compares the rows waiting for a message with the messages SQS holds and re-sends
only as many of the oldest as the queue is missing.
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.integration.sweeper.conftest import Aws, RecordingEvents, insert_received, make_sweep
from webhook_inbox import inbox, wakeups


def _sent_long_ago(conn: psycopg.Connection[Any], ids: list[int], *, minutes: int = 20) -> None:
    """The rows were sent to SQS ``minutes`` ago (oldest first, a second apart)."""
    inbox.mark_enqueued(conn, ids)
    conn.execute(
        "UPDATE webhook_events SET available_at = enqueued_at - %s * interval '1 minute',"
        " enqueued_at = enqueued_at - %s * interval '1 minute'"
        " + (id - %s) * interval '1 second' WHERE id = ANY(%s)",
        (minutes, minutes, ids[0], ids),
    )


def _still_in_the_queue(aws: Aws, ids: list[int]) -> None:
    for chunk in wakeups.chunks(ids):
        wakeups.send_chunk(aws.sqs, aws.queue_url, chunk)


def _time_passes(conn: psycopg.Connection[Any], minutes: int) -> None:
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = enqueued_at - %s * interval '1 minute',"
        " available_at = available_at - %s * interval '1 minute'",
        (minutes, minutes),
    )


def test_rows_waiting_in_a_long_queue_are_not_sent_again(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 30)
    _sent_long_ago(conn, ids)
    _still_in_the_queue(aws, ids)  # no processor has reached them yet

    sent = []
    for _ in range(3):  # three sweeps, 16 minutes apart
        sent.append(make_sweep(conn, aws, events).run().reenqueued)
        _time_passes(conn, 16)

    # Before: 30 per sweep, and the queue held 120 messages for 30 rows.
    assert sent == [0, 0, 0]
    assert sorted(aws.queued_ids()) == ids


def test_only_as_many_stale_rows_as_the_queue_lacks_are_sent_again_oldest_first(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 30)
    _sent_long_ago(conn, ids)
    lost, waiting = ids[:10], ids[10:]  # the oldest ten lost their messages
    _still_in_the_queue(aws, waiting)

    report = make_sweep(conn, aws, events).run()

    assert report.reenqueued == 10  # before: 30
    assert sorted(aws.queued_ids()) == ids
    stamped = conn.execute(
        "SELECT id FROM webhook_events WHERE enqueued_at > now() - interval '1 minute'"
    ).fetchall()
    assert sorted(r[0] for r in stamped) == lost


def test_a_purged_queue_gets_every_waiting_row_again(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 30)
    _sent_long_ago(conn, ids)  # sent, then an operator purged the queue

    assert make_sweep(conn, aws, events).run().reenqueued == 30
    assert sorted(aws.queued_ids()) == ids


def test_rows_never_sent_are_sent_whatever_the_queue_holds(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    waiting = insert_received(conn, 20, prefix="waiting")
    _sent_long_ago(conn, waiting)
    _still_in_the_queue(aws, waiting)
    never_sent = insert_received(conn, 5, prefix="unsent")  # ingest's send failed

    assert make_sweep(conn, aws, events).run().reenqueued == 5
    assert sorted(aws.queued_ids()) == sorted(waiting + never_sent)
