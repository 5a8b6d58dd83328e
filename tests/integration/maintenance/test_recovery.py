"""Steps 1 and 2: expired leases come back, rows the queue never saw are (re)sent."""

from __future__ import annotations

from typing import Any

import psycopg
from botocore.exceptions import ClientError

from tests.integration.maintenance.conftest import (
    Aws,
    RecordingEvents,
    claim,
    insert_received,
    make_sweep,
)
from webhook_inbox.store import inbox


def _lease_and_expire(conn: psycopg.Connection[Any], row_id: int) -> None:
    inbox.lease_events(conn, [row_id], owner="crashed-worker", lease_seconds=60)
    conn.execute(
        "UPDATE webhook_events SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (row_id,),
    )


def _row(conn: psycopg.Connection[Any], row_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT status, error_kind, attempts, enqueued_at IS NOT NULL, lease_owner"
        " FROM webhook_events WHERE id = %s",
        (row_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_expired_lease_becomes_failed_and_is_reenqueued_in_the_same_run(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    row_id = claim(conn, "evt_crashed")
    inbox.mark_enqueued(conn, [row_id])
    _lease_and_expire(conn, row_id)

    report = make_sweep(conn, aws, events).run()

    assert (report.leases_expired, report.leases_dead_lettered, report.reenqueued) == (1, 0, 1)
    assert _row(conn, row_id) == ("failed", "lease_expired", 1, True, None)
    assert aws.queued_ids() == [row_id]
    # The processor can lease it again right away: the expired lease already was the delay.
    assert [e.id for e in inbox.lease_events(conn, [row_id], owner="w2", lease_seconds=30)] == [
        row_id
    ]


def test_expired_lease_with_attempts_spent_is_dead_lettered_and_not_sent(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    row_id = claim(conn, "evt_poison")
    _lease_and_expire(conn, row_id)
    conn.execute("UPDATE webhook_events SET attempts = 3 WHERE id = %s", (row_id,))

    report = make_sweep(conn, aws, events, max_attempts=3).run()

    assert (report.leases_expired, report.leases_dead_lettered, report.reenqueued) == (1, 1, 0)
    assert _row(conn, row_id)[:2] == ("dead_letter", "lease_expired")
    assert aws.queued_ids() == []
    assert report.backlog is not None
    assert report.backlog.dead_lettered_events == 1


def test_a_live_lease_is_left_alone(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    row_id = claim(conn, "evt_busy")
    inbox.lease_events(conn, [row_id], owner="busy-worker", lease_seconds=60)

    report = make_sweep(conn, aws, events).run()

    assert report.leases_expired == 0
    assert _row(conn, row_id)[0] == "processing"
    assert aws.queued_ids() == []


def test_received_row_whose_ingest_send_failed_is_enqueued_by_the_next_sweep_once(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    # Ingest committed the row, then SendMessage failed: enqueued_at stayed NULL.
    row_id = claim(conn, "evt_orphan")

    first = make_sweep(conn, aws, events).run()
    second = make_sweep(conn, aws, events).run()

    assert (first.reenqueued, second.reenqueued) == (1, 0)
    assert aws.queued_ids() == [row_id]
    assert _row(conn, row_id)[3] is True


def test_rows_enqueued_long_ago_and_untouched_are_sent_again_but_recent_ones_are_not(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    lost, recent = claim(conn, "evt_lost"), claim(conn, "evt_recent")
    inbox.mark_enqueued(conn, [lost, recent])
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = now() - interval '20 minutes',"
        " available_at = now() - interval '20 minutes' WHERE id = %s",
        (lost,),
    )

    report = make_sweep(conn, aws, events).run()

    assert (report.reenqueued, report.rewoken) == (0, 1)
    assert aws.queued_ids() == [lost]


def test_failed_rows_are_sent_only_once_due(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    due, later = claim(conn, "evt_due"), claim(conn, "evt_later")
    inbox.lease_events(conn, [due, later], owner="w", lease_seconds=60)
    inbox.mark_failed(conn, due, owner="w", delay_seconds=0, error_kind="retryable", error="x")
    # Beyond SQS's 900 s DelaySeconds cap: only the sweeper can bring this one back.
    inbox.mark_failed(conn, later, owner="w", delay_seconds=3600, error_kind="retryable", error="x")

    make_sweep(conn, aws, events).run()

    assert aws.queued_ids() == [due]


class PartlyFailingSqs:
    """Forwards to moto's SQS but rejects chosen ids per entry, or fails whole calls."""

    def __init__(self, real: Any, *, reject: set[int], raise_on_call: int | None = None) -> None:
        self._real = real
        self._reject = reject
        self._raise_on_call = raise_on_call
        self.calls = 0

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, str]]) -> Any:
        self.calls += 1
        if self.calls == self._raise_on_call:
            raise ClientError(
                {"Error": {"Code": "ServiceUnavailable", "Message": "try later"}},
                "SendMessageBatch",
            )
        keep = [e for e in Entries if int(e["Id"]) not in self._reject]
        answer = self._real.send_message_batch(QueueUrl=QueueUrl, Entries=keep) if keep else {}
        answer.setdefault("Failed", [])
        answer["Failed"] += [
            {"Id": e["Id"], "SenderFault": False, "Code": "InternalError", "Message": "boom"}
            for e in Entries
            if int(e["Id"]) in self._reject
        ]
        return answer


def test_partial_sqs_batch_failure_leaves_only_the_failed_rows_due(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 25)
    rejected = {ids[3], ids[17]}

    report = make_sweep(conn, aws, events, sqs=PartlyFailingSqs(aws.sqs, reject=rejected)).run()

    assert (report.reenqueued, report.enqueue_failed) == (23, 2)
    assert sorted(aws.queued_ids()) == sorted(set(ids) - rejected)
    assert any("InternalError" in e for e in report.errors)
    unsent = conn.execute("SELECT id FROM webhook_events WHERE enqueued_at IS NULL").fetchall()
    assert {r[0] for r in unsent} == rejected

    # SQS recovered: the next run sends exactly the two that failed.
    make_sweep(conn, aws, events).run()
    assert sorted(aws.queued_ids()) == sorted(ids)


def test_sqs_outage_stops_sending_for_this_run_and_keeps_rows_due(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    ids = insert_received(conn, 30)
    sqs = PartlyFailingSqs(aws.sqs, reject=set(), raise_on_call=2)

    report = make_sweep(conn, aws, events, sqs=sqs).run()

    # First call sent 10; the second failed; the run did not hammer SQS with the third.
    assert sqs.calls == 2
    assert (report.reenqueued, report.enqueue_failed) == (10, 10)
    assert report.errors == ["reenqueue: ServiceUnavailable: try later"]
    make_sweep(conn, aws, events).run()
    assert sorted(aws.queued_ids()) == sorted(ids)
