"""Replay end to end: CLI → SQS (moto) → the real processor function → domain tables + outbox."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.support import FakeLambdaContext, load_function
from webhook_inbox.processing import batch as processing
from webhook_inbox.store import inbox
from webhook_inbox_tools.dev.lambda_runtime import failed_message_ids, sqs_event


class Pipeline:
    """The processing queue and the processor, wired as the event source mapping wires them."""

    def __init__(self, sqs: Any, url: str, processor: ModuleType) -> None:
        self.sqs, self.url, self.processor = sqs, url, processor

    def deliver_pending(self) -> list[dict[str, Any]]:
        """Receive whatever is queued, run the processor on it, delete what succeeded."""
        reply = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10)
        batch = reply.get("Messages", [])
        if not batch:
            return []
        event = sqs_event(batch, "arn:aws:sqs:us-east-1:123456789012:processing", "us-east-1")
        response = self.processor.handler(event, FakeLambdaContext())
        failed = failed_message_ids(response, batch)
        for message in batch:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])
        return [json.loads(m["Body"]) for m in batch]

    def send(self, row_id: int) -> None:
        self.sqs.send_message(QueueUrl=self.url, MessageBody=json.dumps({"id": row_id}))


@pytest.fixture
def pipeline(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="processing")["QueueUrl"]
        monkeypatch.setenv("PROCESSING_QUEUE_URL", url)
        monkeypatch.setattr(processing, "sqs_client", lambda: sqs)
        yield Pipeline(sqs, url, load_function("processor"))


def _customer_created(conn: psycopg.Connection[Any], event_id: str, customer: str) -> int:
    payload = {
        "id": event_id,
        "object": "event",
        "type": "customer.created",
        "created": 1_700_000_000,
        "data": {"object": {"id": customer, "object": "customer"}},
    }
    body = json.dumps(payload).encode()
    return inbox.claim_event(
        conn,
        provider="stripe",
        event_id=event_id,
        event_type="customer.created",
        body_sha256=hashlib.sha256(body).digest(),
        payload=payload,
    ).id


def _domain(conn: psycopg.Connection[Any]) -> dict[str, list[Any]]:
    return {
        "customers": conn.execute(
            "SELECT provider, customer_id, status, created_event_id, created_at FROM customers"
            " ORDER BY 1, 2"
        ).fetchall(),
        "subscriptions": conn.execute("SELECT * FROM subscriptions ORDER BY 1, 2").fetchall(),
        "outbox": conn.execute(
            "SELECT id, topic, deduplication_key, payload FROM outbox_messages ORDER BY id"
        ).fetchall(),
    }


def _state(conn: psycopg.Connection[Any], row_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT status, attempts, last_error FROM webhook_events WHERE id = %s", (row_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_replayed_dead_letter_goes_through_the_handler_and_is_applied_once(
    cli: Any, conn: psycopg.Connection[Any], pipeline: Pipeline
) -> None:
    row_id = _customer_created(conn, "evt_dl", "cus_dl")
    conn.execute(
        "UPDATE webhook_events SET status = 'dead_letter', attempts = 8,"
        " error_kind = 'retryable', last_error = 'downstream timeout' WHERE id = %s",
        (row_id,),
    )

    result = cli(
        "replay", "stripe", "evt_dl", "--reason", "downstream is back", "--queue-url", pipeline.url
    )
    assert result.code == 0, result.err
    assert pipeline.deliver_pending() == [{"id": row_id}]

    assert _state(conn, row_id) == ("processed", 1, None)
    domain = _domain(conn)
    assert [c[:4] for c in domain["customers"]] == [("stripe", "cus_dl", "active", "evt_dl")]
    assert [m[1] for m in domain["outbox"]] == ["customer.created"]
    audit = conn.execute(
        "SELECT previous_status, previous_attempts, previous_last_error FROM operator_actions"
        " WHERE event_row_id = %s",
        (row_id,),
    ).fetchall()
    assert audit == [("dead_letter", 8, "downstream timeout")]

    # SQS delivers at least once: the same wake-up again changes nothing.
    pipeline.send(row_id)
    assert pipeline.deliver_pending() == [{"id": row_id}]
    assert _domain(conn) == domain
    assert _state(conn, row_id) == ("processed", 1, None)


def test_replay_of_a_processed_event_changes_no_domain_row(
    cli: Any, conn: psycopg.Connection[Any], pipeline: Pipeline
) -> None:
    row_id = _customer_created(conn, "evt_ok", "cus_ok")
    pipeline.send(row_id)
    pipeline.deliver_pending()
    assert _state(conn, row_id)[0] == "processed"
    before = _domain(conn)
    assert len(before["customers"]) == 1
    assert len(before["outbox"]) == 1

    result = cli(
        "replay", "stripe", "evt_ok", "--reason", "audit check", "--queue-url", pipeline.url
    )
    assert result.code == 0, result.err
    assert pipeline.deliver_pending() == [{"id": row_id}]

    assert _state(conn, row_id) == ("processed", 1, None)  # handled again, attempts from 0
    assert _domain(conn) == before
    actions = conn.execute("SELECT count(*) FROM operator_actions").fetchone()
    assert actions == (1,)
