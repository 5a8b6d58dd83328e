"""Step 3: the outbox reaches EventBridge / SNS at least once, under one deduplication key."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import boto3
import psycopg
import pytest
from botocore.exceptions import ClientError
from psycopg.types.json import Jsonb

from tests.integration.maintenance.conftest import (
    REGION,
    Aws,
    RecordingEvents,
    insert_pending_outbox,
    make_config,
    make_sweep,
)
from tests.support import FakeLambdaContext
from webhook_inbox.errors import StoreUnavailable
from webhook_inbox.maintenance.publishers import SnsPublisher
from webhook_inbox.maintenance.sweeper import Sweep
from webhook_inbox.store import outbox


def _statuses(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, int]]:
    rows = conn.execute(
        "SELECT deduplication_key, status, attempts FROM outbox_messages"
    ).fetchall()
    return {key: (status, attempts) for key, status, attempts in rows}


def _make_all_due(conn: psycopg.Connection[Any]) -> None:
    conn.execute("UPDATE outbox_messages SET available_at = now() WHERE status = 'pending'")


def test_eventbridge_entries_carry_the_deduplication_key(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    events = RecordingEvents(forward=boto3.client("events", region_name=REGION))
    outbox.add_message(
        conn,
        topic="customer.welcome",
        deduplication_key="stripe:evt_1:customer.welcome",
        payload={"customer": "cus_1"},
        source_event_id=None,
    )

    report = make_sweep(conn, aws, events).run()

    assert report.outbox_published == 1
    [entry] = events.entries
    assert entry["Source"] == "webhook-inbox"
    assert entry["DetailType"] == "customer.welcome"
    assert entry["EventBusName"] == "default"
    assert json.loads(entry["Detail"]) == {
        "deduplication_key": "stripe:evt_1:customer.welcome",
        "topic": "customer.welcome",
        "payload": {"customer": "cus_1"},
    }
    row = conn.execute("SELECT status, published_at IS NOT NULL FROM outbox_messages").fetchone()
    assert row == ("published", True)


def test_failed_entries_retry_with_backoff_the_rest_publish_and_nothing_publishes_twice(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    keys = insert_pending_outbox(conn, 25)
    throttled = set(keys[::5])  # five of them
    events = RecordingEvents(
        fail=lambda entry: json.loads(entry["Detail"])["deduplication_key"] in throttled
    )

    first = make_sweep(conn, aws, events, retry_base_seconds=60).run()

    assert (first.outbox_published, first.outbox_retried, first.outbox_dead) == (20, 5, 0)
    assert set(events.published_keys()) == set(keys) - throttled
    delays = conn.execute(
        "SELECT extract(epoch FROM available_at - now()), last_error, lease_expires_at"
        " FROM outbox_messages WHERE status = 'pending'"
    ).fetchall()
    assert len(delays) == 5
    for delay, error, lease in delays:
        assert 25 <= delay <= 60  # attempt 1: uniform in [base/2, base], less elapsed time
        assert error == "ThrottlingException: slow down"
        assert lease is None

    # The next run comes before the backoff ends: nothing is due, nothing is republished.
    second = make_sweep(conn, aws, events, retry_base_seconds=60).run()
    assert second.outbox_published == 0
    assert len(events.entries) == 20

    throttled.clear()
    _make_all_due(conn)
    third = make_sweep(conn, aws, events, retry_base_seconds=60).run()
    assert third.outbox_published == 5
    assert Counter(events.published_keys()) == Counter(keys)  # each key exactly once
    assert {s for s, _ in _statuses(conn).values()} == {"published"}


def test_backoff_grows_with_the_attempt_number(conn: psycopg.Connection[Any], aws: Aws) -> None:
    insert_pending_outbox(conn, 1)
    events = RecordingEvents(fail=lambda entry: True)
    seen = []
    for _ in range(3):
        make_sweep(conn, aws, events, retry_base_seconds=10, retry_max_seconds=3600).run()
        seen.append(
            conn.execute(
                "SELECT extract(epoch FROM available_at - now()) FROM outbox_messages"
            ).fetchone()[0]  # type: ignore[index]
        )
        _make_all_due(conn)
    assert 4 <= seen[0] <= 10
    assert 9 <= seen[1] <= 20
    assert 19 <= seen[2] <= 40


def test_a_message_failing_every_attempt_becomes_dead(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    doomed, fine = insert_pending_outbox(conn, 2)
    events = RecordingEvents(
        fail=lambda entry: json.loads(entry["Detail"])["deduplication_key"] == doomed
    )
    reports = []
    for _ in range(4):
        reports.append(make_sweep(conn, aws, events, outbox_max_attempts=3).run())
        _make_all_due(conn)

    assert [r.outbox_dead for r in reports] == [0, 0, 1, 0]
    assert [r.outbox_retried for r in reports] == [1, 1, 0, 0]
    assert _statuses(conn) == {doomed: ("dead", 3), fine: ("published", 1)}
    assert events.published_keys() == [fine]
    last_error = conn.execute(
        "SELECT last_error FROM outbox_messages WHERE status = 'dead'"
    ).fetchone()
    assert last_error == ("ThrottlingException: slow down",)
    assert reports[-1].backlog is not None
    assert reports[-1].backlog.outbox_dead == 1


def test_a_message_too_large_for_the_api_is_dead_at_once_and_spares_its_batch(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    keys = insert_pending_outbox(conn, 3)
    conn.execute(
        "UPDATE outbox_messages SET payload = %s WHERE deduplication_key = %s",
        (Jsonb({"blob": "x" * 300_000}), keys[1]),
    )

    report = make_sweep(conn, aws, events).run()

    assert (report.outbox_published, report.outbox_dead) == (2, 1)
    assert _statuses(conn)[keys[1]] == ("dead", 1)
    assert sorted(events.published_keys()) == sorted([keys[0], keys[2]])


def test_a_whole_call_failure_retries_every_entry_of_that_call(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    keys = insert_pending_outbox(conn, 3)

    class Unreachable:
        def put_events(self, Entries: list[dict[str, Any]]) -> Any:
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}},
                "PutEvents",
            )

    report = make_sweep(conn, aws, Unreachable()).run()  # type: ignore[arg-type]

    assert (report.outbox_published, report.outbox_retried) == (0, 3)
    assert report.errors == ["outbox: ThrottlingException: Rate exceeded"]
    assert _statuses(conn) == dict.fromkeys(keys, ("pending", 1))


def test_crash_after_publish_before_mark_republishes_under_the_same_key(
    conn: psycopg.Connection[Any],
    aws: Aws,
    events: RecordingEvents,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    [key] = insert_pending_outbox(conn, 1)

    def crash(*args: Any, **kwargs: Any) -> int:
        raise StoreUnavailable("connection lost between publish and mark")

    with monkeypatch.context() as patch:
        patch.setattr(outbox, "mark_published", crash)
        with pytest.raises(StoreUnavailable):
            make_sweep(conn, aws, events).run()

    assert events.published_keys() == [key]
    assert _statuses(conn) == {key: ("pending", 1)}

    # While the crashed run's lease lasts, nobody republishes.
    make_sweep(conn, aws, events).run()
    assert len(events.entries) == 1

    conn.execute("UPDATE outbox_messages SET lease_expires_at = now() - interval '1 second'")
    report = make_sweep(conn, aws, events).run()

    assert report.outbox_published == 1
    assert events.published_keys() == [key, key]
    assert events.entries[0]["Detail"] == events.entries[1]["Detail"]
    assert _statuses(conn) == {key: ("published", 2)}


def test_time_running_out_mid_batch_releases_the_unsent_claims(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    keys = insert_pending_outbox(conn, 50)
    context = FakeLambdaContext(remaining_ms=60_000)

    def time_passes(calls: int) -> None:
        if calls == 2:
            context.remaining_ms = 9_000  # under the 10 s safety margin

    events = RecordingEvents(after_call=time_passes)

    report = make_sweep(conn, aws, events, context=context, outbox_batch=50).run()

    assert report.outbox_published == 20
    assert report.outbox_released == 30
    assert report.stopped_early_at == "outbox"
    released = conn.execute(
        "SELECT count(*) FROM outbox_messages"
        " WHERE status = 'pending' AND attempts = 0 AND lease_expires_at IS NULL"
    ).fetchone()
    assert released == (30,)

    context.remaining_ms = 60_000
    make_sweep(conn, aws, events, context=context).run()
    assert Counter(events.published_keys()) == Counter(keys)


# --- SNS ---------------------------------------------------------------------------------


def _sns_sweep(conn: psycopg.Connection[Any], aws: Aws, client: Any, topic_arn: str) -> Sweep:
    return Sweep(
        conn,
        make_config(aws.queue_url),
        sqs=aws.sqs,
        publisher=SnsPublisher(client, topic_arn=topic_arn),
        remaining_ms=FakeLambdaContext().get_remaining_time_in_millis,
    )


def test_sns_messages_carry_the_key_in_an_attribute_and_the_body(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    sns = boto3.client("sns", region_name=REGION)
    topic_arn = sns.create_topic(Name="webhook-inbox-outbox")["TopicArn"]
    subscriber = aws.sqs.create_queue(QueueName="subscriber")["QueueUrl"]
    subscriber_arn = aws.sqs.get_queue_attributes(QueueUrl=subscriber, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    sns.subscribe(
        TopicArn=topic_arn,
        Protocol="sqs",
        Endpoint=subscriber_arn,
        Attributes={"RawMessageDelivery": "true"},
    )
    keys = insert_pending_outbox(conn, 12)  # two PublishBatch calls

    report = _sns_sweep(conn, aws, sns, topic_arn).run()

    assert report.outbox_published == 12
    received = []
    for _ in range(5):
        batch = aws.sqs.receive_message(
            QueueUrl=subscriber, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
        received += batch
        if not batch:
            break
    assert len(received) == 12
    for message in received:
        body = json.loads(message["Body"])
        attribute = message["MessageAttributes"]["deduplication_key"]["StringValue"]
        assert attribute == body["deduplication_key"]
        assert body["topic"] == "customer.welcome"
    assert sorted(json.loads(m["Body"])["deduplication_key"] for m in received) == sorted(keys)


class RecordingSns:
    def __init__(self, reject: set[str]) -> None:
        self.reject = reject
        self.entries: list[dict[str, Any]] = []

    def publish_batch(
        self,
        TopicArn: str,
        PublishBatchRequestEntries: list[dict[str, Any]],
    ) -> dict[str, Any]:
        assert len(PublishBatchRequestEntries) <= 10
        ok, failed = [], []
        for entry in PublishBatchRequestEntries:
            key = entry["MessageAttributes"]["deduplication_key"]["StringValue"]
            if key in self.reject:
                failed.append({"Id": entry["Id"], "Code": "InternalError", "SenderFault": False})
            else:
                self.entries.append(entry)
                ok.append({"Id": entry["Id"], "MessageId": "m"})
        return {"Successful": ok, "Failed": failed}


def test_sns_partial_failure_retries_only_the_failed_entries(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    keys = insert_pending_outbox(conn, 4)
    sns = RecordingSns(reject={keys[2]})

    report = _sns_sweep(conn, aws, sns, "arn:aws:sns:us-east-1:123456789012:t").run()

    assert (report.outbox_published, report.outbox_retried) == (3, 1)
    assert _statuses(conn)[keys[2]] == ("pending", 1)
    assert report.errors == ["outbox: InternalError: "]


def test_sns_fifo_topics_get_a_deduplication_id_derived_from_the_key(
    conn: psycopg.Connection[Any], aws: Aws
) -> None:
    [key] = insert_pending_outbox(conn, 1)
    sns = RecordingSns(reject=set())

    _sns_sweep(conn, aws, sns, "arn:aws:sns:us-east-1:123456789012:t.fifo").run()

    [entry] = sns.entries
    assert entry["MessageDeduplicationId"] == hashlib.sha256(key.encode()).hexdigest()
    assert entry["MessageGroupId"] == "customer.welcome"
