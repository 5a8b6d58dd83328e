"""The stale rule: a lost wake-up is re-sent within a bound, whatever else the queue holds.

Issue 24, item 2: the rule re-sent only ``waiting - held`` rows (rows stamped as sent and still
waiting, minus the messages SQS held, in flight included). Under steady traffic the in-flight
messages of other rows kept ``held`` at or above the number of lost rows, and a row whose wake-up
was lost stayed ``received`` for as long as the traffic lasted. A count cannot say which row lost
its message. Now every row sent over ``reenqueue_stale_seconds`` (8 minutes) ago and still waiting
is re-woken and stamped again, at most once per window, packed 25 to a message
(``{"ids": [...]}``), so a long healthy backlog grows by 4 % (plus at most one message per run).

Time is the stamps': between sweeps every stamp moves one minute into the past.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
from botocore.exceptions import ClientError

from tests.integration.maintenance.conftest import Aws, RecordingEvents, insert_received, make_sweep
from tests.integration.maintenance.test_recovery import PartlyFailingSqs
from webhook_inbox import wakeups
from webhook_inbox.store import inbox

WINDOW_S = 480  # SweeperSettings.reenqueue_stale_seconds
BOUND_MINUTES = 10  # the design's promise: re-sent within 10 minutes of the stamp


def _sent(conn: psycopg.Connection[Any], ids: list[int], aws: Aws | None = None) -> None:
    """Stamp the rows as sent now; with ``aws``, their messages are in the queue too."""
    inbox.mark_enqueued(conn, ids)
    if aws is not None:
        for chunk in wakeups.chunks(ids):
            wakeups.send_chunk(aws.sqs, aws.queue_url, chunk)


def _minute_passes(conn: psycopg.Connection[Any], seconds: float = 60) -> None:
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = enqueued_at - make_interval(secs => %s),"
        " available_at = available_at - make_interval(secs => %s),"
        " received_at = received_at - make_interval(secs => %s)",
        (seconds, seconds, seconds),
    )


def _take_in_flight(aws: Aws, count: int) -> None:
    """A processor receives ``count`` messages and is still working on them (in flight)."""
    while count > 0:
        got = aws.sqs.receive_message(
            QueueUrl=aws.queue_url, MaxNumberOfMessages=min(count, 10), VisibilityTimeout=3600
        ).get("Messages", [])
        if not got:
            return
        count -= len(got)


def _processed(conn: psycopg.Connection[Any], ids: list[int]) -> None:
    conn.execute(
        "UPDATE webhook_events SET status = 'processed', processed_at = now() WHERE id = ANY(%s)",
        (ids,),
    )


def test_lost_wake_ups_under_steady_traffic_are_re_sent_within_the_bound(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    lost = insert_received(conn, 5, prefix="lost")
    _sent(conn, lost)  # stamped, and the messages never reached the queue (a crash, a purge)
    rewoken_at: dict[int, int] = {}
    previous: list[int] = []
    for minute in range(2 * BOUND_MINUTES):
        # Steady unrelated traffic: ten new rows a minute, each with its message; a processor
        # holds ten messages in flight and finishes the previous minute's rows.
        arrived = insert_received(conn, 10, prefix=f"minute{minute}")
        _sent(conn, arrived, aws)
        _take_in_flight(aws, 10)
        _processed(conn, previous)
        previous = arrived

        make_sweep(conn, aws, events).run()

        for row_id in set(aws.queued_ids()) & set(lost):
            rewoken_at.setdefault(row_id, minute)
        _minute_passes(conn)

    # Before: {} (the in-flight messages of other rows counted as the lost rows' own).
    assert rewoken_at == dict.fromkeys(lost, WINDOW_S // 60)
    assert max(rewoken_at.values()) < BOUND_MINUTES
    # Only the waiting rows were re-woken, packed into one message.
    rewakes = [body["ids"] for body in aws.bodies() if "ids" in body]
    assert sorted(i for ids in rewakes for i in ids) == sorted(lost * 2)  # minutes 8 and 16
    assert len(rewakes) == 2


def test_a_re_wake_that_is_lost_too_is_sent_again_one_window_later(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    lost = insert_received(conn, 3)
    _sent(conn, lost)
    _minute_passes(conn, WINDOW_S)
    assert make_sweep(conn, aws, events).run().rewoken == 3
    aws.sqs.purge_queue(QueueUrl=aws.queue_url)  # the re-wake is lost as well

    sent = []
    for _ in range(WINDOW_S // 60):
        _minute_passes(conn)
        sent.append(make_sweep(conn, aws, events).run().rewoken)

    assert sent == [0] * (WINDOW_S // 60 - 1) + [3]  # once per window, not every minute
    assert sorted(aws.queued_ids()) == lost


def test_a_long_healthy_backlog_grows_by_under_ten_percent_per_window(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    backlog = 1_000
    ids = insert_received(conn, backlog)
    _sent(conn, ids, aws)  # every row has its message: processors are throttled, not broken
    # Sent at a steady rate over the last window, oldest first.
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = enqueued_at"
        " - make_interval(secs => %s * (%s - (id - %s)) / %s::float8),"
        " available_at = available_at - make_interval(secs => %s)",
        (WINDOW_S, backlog, ids[0], backlog, WINDOW_S),
    )
    minutes_per_window = WINDOW_S // 60
    added_per_window = []
    rewoken_per_window = []
    for _ in range(3):
        before = len(aws.bodies())
        rewoken = 0
        for _ in range(minutes_per_window):
            rewoken += make_sweep(conn, aws, events).run().rewoken
            _minute_passes(conn)
        added_per_window.append(len(aws.bodies()) - before)
        rewoken_per_window.append(rewoken)

    # Before this change the count rule sent 0 here; re-sending every stale row alone would add
    # 1,000 messages (100 %) per window.
    assert all(added <= backlog // 10 for added in added_per_window), added_per_window
    # Once a row's stamp has reached the window's age it is re-woken once per window, never
    # twice (the first window reaches the rows sent in its first seven minutes).
    assert rewoken_per_window[1:] == [backlog, backlog], rewoken_per_window
    rewakes = [body["ids"] for body in aws.bodies() if "ids" in body]
    assert all(len(ids) <= wakeups.MAX_IDS_PER_MESSAGE for ids in rewakes)
    times_rewoken = Counter(i for ids in rewakes for i in ids)
    assert set(times_rewoken) == set(ids)
    assert set(times_rewoken.values()) <= {2, 3}
    print(f"messages added per window of {minutes_per_window} sweeps: {added_per_window}")


def test_a_purged_queue_gets_every_waiting_row_again_in_packed_messages(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 610)
    _sent(conn, ids)  # sent, then an operator purged the queue
    _minute_passes(conn, WINDOW_S)

    report = make_sweep(conn, aws, events).run()

    # Three claims of up to 250 (one SendMessageBatch each) in the same run.
    assert (report.rewoken, report.reenqueued) == (610, 0)
    assert sorted(aws.queued_ids()) == ids
    assert sorted(len(body["ids"]) for body in aws.bodies()) == [10] + [25] * 24


def test_re_wakes_per_run_stop_at_the_cap_and_the_next_run_goes_on_oldest_first(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 300)
    _sent(conn, ids)
    # Oldest first by stamp: the row with the lowest id was stamped first.
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = enqueued_at - (%s - id) * interval '1 ms'",
        (ids[-1],),
    )
    _minute_passes(conn, WINDOW_S)

    first = make_sweep(conn, aws, events, stale_resend_cap=120).run()
    assert sorted(aws.queued_ids()) == ids[:120]
    second = make_sweep(conn, aws, events, stale_resend_cap=1_000).run()

    assert (first.rewoken, second.rewoken) == (120, 180)
    assert sorted(aws.queued_ids()) == ids


def test_rows_never_sent_are_sent_alone_whatever_the_queue_holds(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    waiting = insert_received(conn, 20, prefix="waiting")
    _sent(conn, waiting, aws)
    never_sent = insert_received(conn, 5, prefix="unsent")  # ingest's send failed

    report = make_sweep(conn, aws, events).run()

    assert (report.reenqueued, report.rewoken) == (5, 0)
    assert sorted(aws.queued_ids()) == sorted(waiting + never_sent)
    assert all("id" in body for body in aws.bodies())


class RefusingSqs:
    """SQS refusing every call (an outage)."""

    def send_message_batch(self, **_: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}, "SendMessageBatch"
        )


def test_a_re_wake_that_could_not_be_sent_stays_stale_for_the_next_run(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 30)
    _sent(conn, ids)
    _minute_passes(conn, WINDOW_S)

    failed = make_sweep(conn, aws, events, sqs=RefusingSqs()).run()

    assert (failed.rewoken, failed.enqueue_failed) == (0, 30)
    # Still stamped (not turned into never-sent rows, which would go one message each).
    unstamped = conn.execute("SELECT count(*) FROM webhook_events WHERE enqueued_at IS NULL")
    assert unstamped.fetchone() == (0,)
    assert make_sweep(conn, aws, events).run().rewoken == 30
    assert [len(body["ids"]) for body in aws.bodies()] == [25, 5]


def test_a_re_wake_message_sqs_rejects_leaves_its_rows_stale_and_the_others_sent(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 60)
    _sent(conn, ids)
    _minute_passes(conn, WINDOW_S)
    second_message = {1}  # entry ids of a re-wake call number its messages from 0

    report = make_sweep(conn, aws, events, sqs=PartlyFailingSqs(aws.sqs, reject=second_message))
    first = report.run()

    assert (first.rewoken, first.enqueue_failed) == (35, 25)
    assert len(aws.queued_ids()) == 35
    assert make_sweep(conn, aws, events).run().rewoken == 25
    assert sorted(aws.queued_ids()) == ids
