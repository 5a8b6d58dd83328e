"""A database outage longer than the queue's five receives moves no wake-up to the DLQ.

Each wake-up queued when the database went away is received every visibility timeout, and the
processor, unable to lease its row, hands it back. On the fifth receive (the queue's
maxReceiveCount) it is acknowledged instead: the row is still in PostgreSQL, untouched, and the
sweeper wakes it once the database answers. Otherwise the redrive would move it to the DLQ and
page dlq-not-empty beside store-unavailable, for one cause.

moto's SQS applies the redrive policy on receive as SQS does; the records the processor gets
carry the ApproximateReceiveCount SQS reports.
"""

from __future__ import annotations

import copy
import json
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.conftest import RetryQueue
from tests.integration.processing.helpers import failures, invoke, row, store_event
from tests.support import load_event
from webhook_inbox import config
from webhook_inbox.store import db

UNREACHABLE = "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1"
MAX_RECEIVES = 5  # template.yaml: ProcessingQueue's RedrivePolicy


def _queue_with_dlq(sqs: Any) -> tuple[str, str]:
    dlq = sqs.create_queue(QueueName="outage-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]
    policy = {"deadLetterTargetArn": arn["QueueArn"], "maxReceiveCount": str(MAX_RECEIVES)}
    queue = sqs.create_queue(
        QueueName="outage-wakeups", Attributes={"RedrivePolicy": json.dumps(policy)}
    )["QueueUrl"]
    return queue, dlq


def _poll_until_empty(sqs: Any, queue: str, processor: ModuleType) -> list[int]:
    """Lambda's event source mapping, one receive at a time: a record the processor lists in
    batchItemFailures becomes visible again (its visibility timeout, cut short), any other is
    deleted. Returns the receive counts the processor saw."""
    template = load_event("sqs-batch")["Records"][0]
    seen: list[int] = []
    for _ in range(3 * MAX_RECEIVES):
        got = sqs.receive_message(
            QueueUrl=queue, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"]
        ).get("Messages", [])
        if not got:
            return seen
        records = []
        for message in got:
            record = copy.deepcopy(template)
            record.update(
                messageId=message["MessageId"],
                receiptHandle=message["ReceiptHandle"],
                body=message["Body"],
            )
            record["attributes"]["ApproximateReceiveCount"] = message["Attributes"][
                "ApproximateReceiveCount"
            ]
            seen.append(int(record["attributes"]["ApproximateReceiveCount"]))
            records.append(record)
        handed_back = set(failures(invoke(processor, {"Records": records})))
        for message in got:
            if message["MessageId"] in handed_back:
                sqs.change_message_visibility(
                    QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
            else:
                sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    raise AssertionError("the queue never emptied")


def _depth(sqs: Any, queue: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


@pytest.mark.parametrize(
    "case",
    [
        (MAX_RECEIVES, 0),  # as deployed: the processor knows the queue's last receive
        # A processor that does not (a queue redriving sooner than it thinks): the redrive moves
        # the wake-up to the DLQ, which shows the test's queue is the real thing.
        (MAX_RECEIVES + 1, 1),
    ],
)
def test_queued_wakeups_outlive_a_database_outage_without_reaching_the_dlq(
    processor: ModuleType,
    retry_queue: RetryQueue,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[int, int],
) -> None:
    processor_counts_to, dead_lettered = case
    sqs = retry_queue.client
    queue, dlq = _queue_with_dlq(sqs)
    row_id = store_event(conn, event_type="charge.unknown", payload={"id": "ch_outage"})
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"id": row_id}))
    monkeypatch.setenv("WAKEUP_MAX_RECEIVES", str(processor_counts_to))
    monkeypatch.setenv("DATABASE_URL", UNREACHABLE)
    config.reset()
    db.reset_for_tests()

    seen = _poll_until_empty(sqs, queue, processor)

    assert seen == list(range(1, MAX_RECEIVES + 1))  # every receive reached the processor
    assert _depth(sqs, dlq) == dead_lettered
    assert _depth(sqs, queue) == 0
    # The row is as ingest left it: the sweeper's stale rule wakes it when the database is back.
    assert row(conn, row_id)["status"] == "received"


def test_a_handed_back_message_before_its_last_receive_comes_back(
    processor: ModuleType,
    retry_queue: RetryQueue,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short outage keeps SQS's retry: only the last receive gives way to the sweeper."""
    row_id = store_event(conn, event_type="charge.unknown", payload={"id": "ch_short"})
    monkeypatch.setenv("DATABASE_URL", UNREACHABLE)
    config.reset()
    db.reset_for_tests()
    template = load_event("sqs-batch")["Records"][0]
    answers = []
    for count in (1, MAX_RECEIVES - 1, MAX_RECEIVES):
        record = copy.deepcopy(template)
        record.update(messageId=f"m{count}", body=json.dumps({"id": row_id}))
        record["attributes"]["ApproximateReceiveCount"] = str(count)
        answers.append(failures(invoke(processor, {"Records": [record]})))
    assert answers == [["m1"], [f"m{MAX_RECEIVES - 1}"], []]
