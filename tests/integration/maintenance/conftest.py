"""Fixtures for the sweeper: a moto SQS queue, recording publisher clients, row builders."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends
from psycopg.types.json import Jsonb

from tests.support import FakeLambdaContext
from webhook_inbox.maintenance.publishers import EventBridgePublisher
from webhook_inbox.maintenance.sweeper import Sweep
from webhook_inbox.settings import SweeperSettings
from webhook_inbox.store import inbox

REGION = "us-east-1"
QUEUE_NAME = "webhook-inbox-processing"


@dataclass
class Aws:
    sqs: Any
    queue_url: str

    def bodies(self) -> list[dict[str, Any]]:
        """Every message in the processing queue (waiting or in flight), read from moto's store.

        Reading moto's queue directly instead of calling ReceiveMessage: moto scans the whole
        queue on every call, which makes draining a thousand messages take minutes.
        """
        queue = sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues[QUEUE_NAME]
        return [json.loads(m.body) for m in queue._messages]

    def queued_ids(self) -> list[int]:
        """Row ids of every message in the queue: ``{"id": N}`` and re-wakes' ``{"ids": […]}``."""
        return [i for body in self.bodies() for i in body.get("ids", [body.get("id")])]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName=QUEUE_NAME)["QueueUrl"]
        monkeypatch.setenv("PROCESSING_QUEUE_URL", url)
        yield Aws(sqs=sqs, queue_url=url)


@dataclass
class RecordingEvents:
    """An EventBridge client that records every entry it is given.

    ``fail(entry)`` chooses entries to reject with a per-entry error, as PutEvents does when an
    entry is throttled; ``forward`` sends the accepted ones on (to moto) when set. ``after_call``
    runs after each call (tests use it to make time pass).
    """

    forward: Any = None
    fail: Callable[[dict[str, Any]], bool] = lambda entry: False
    after_call: Callable[[int], None] = lambda calls: None
    entries: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        assert len(Entries) <= 10
        answers = []
        with self._lock:
            self.calls += 1
            calls = self.calls
        for entry in Entries:
            if self.fail(entry):
                answers.append({"ErrorCode": "ThrottlingException", "ErrorMessage": "slow down"})
                continue
            with self._lock:
                self.entries.append(entry)
            if self.forward is not None:
                self.forward.put_events(Entries=[entry])
            answers.append({"EventId": f"evt-{len(self.entries)}"})
        self.after_call(calls)
        failed = sum(1 for a in answers if "ErrorCode" in a)
        return {"FailedEntryCount": failed, "Entries": answers}

    def published_keys(self) -> list[str]:
        return [json.loads(e["Detail"])["deduplication_key"] for e in self.entries]


@pytest.fixture
def events() -> RecordingEvents:
    return RecordingEvents()


def make_config(queue_url: str, **overrides: Any) -> SweeperSettings:
    return SweeperSettings(queue_url=queue_url, **overrides)


def make_sweep(
    conn: psycopg.Connection[Any],
    aws: Aws,
    events: RecordingEvents,
    *,
    context: FakeLambdaContext | None = None,
    sqs: Any = None,
    **overrides: Any,
) -> Sweep:
    ctx = context or FakeLambdaContext()
    return Sweep(
        conn,
        make_config(aws.queue_url, **overrides),
        sqs=sqs or aws.sqs,
        publisher=EventBridgePublisher(events, event_bus_name="default"),
        remaining_ms=ctx.get_remaining_time_in_millis,
    )


def claim(conn: psycopg.Connection[Any], event_id: str, payload: Any = None) -> int:
    payload = {"id": event_id} if payload is None else payload
    return inbox.claim_event(
        conn,
        provider="stripe",
        event_id=event_id,
        event_type="customer.created",
        body_sha256=hashlib.sha256(json.dumps(payload).encode()).digest(),
        payload=payload,
    ).id


def insert_received(conn: psycopg.Connection[Any], count: int, *, prefix: str = "evt") -> list[int]:
    """``count`` received rows never enqueued (the ingest's SQS send failed), in one statement."""
    rows = conn.execute(
        "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload)"
        " SELECT 'stripe', %s || g, 'customer.created', sha256(g::text::bytea), %s"
        " FROM generate_series(1, %s) AS g RETURNING id",
        (f"{prefix}_", Jsonb({"object": "event"}), count),
    ).fetchall()
    return [r[0] for r in rows]


def insert_pending_outbox(conn: psycopg.Connection[Any], count: int) -> list[str]:
    """``count`` pending outbox messages, due now; returns their deduplication keys."""
    rows = conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload)"
        " SELECT 'customer.welcome', 'stripe:evt_' || g || ':customer.welcome',"
        " jsonb_build_object('n', g) FROM generate_series(1, %s) AS g"
        " RETURNING deduplication_key",
        (count,),
    ).fetchall()
    return [r[0] for r in rows]


def make_terminal(
    conn: psycopg.Connection[Any], row_id: int, status: str, *, days_ago: float
) -> None:
    """Move a row to a terminal status last changed ``days_ago`` (retention's clock)."""
    conn.execute(
        "UPDATE webhook_events SET status = %s, updated_at = now() - %s * interval '1 day',"
        " processed_at = CASE WHEN %s IN ('processed', 'ignored') THEN now() END"
        " WHERE id = %s",
        (status, days_ago, status, row_id),
    )
