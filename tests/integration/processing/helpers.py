"""Helpers for the processor tests: stored events, SQS events, responses, metrics, rows."""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from types import ModuleType
from typing import Any

import psycopg

from tests.support import FakeLambdaContext, load_event
from webhook_inbox.errors import RetryableEventError
from webhook_inbox.store import inbox


def store_event(
    conn: psycopg.Connection[Any],
    *,
    provider: str = "stripe",
    event_type: str,
    payload: dict[str, Any],
    event_id: str | None = None,
) -> int:
    event_id = event_id or str(payload.get("id") or f"evt_{uuid.uuid4().hex[:16]}")
    body = json.dumps(payload, sort_keys=True).encode()
    return inbox.claim_event(
        conn,
        provider=provider,
        event_id=event_id,
        event_type=event_type,
        body_sha256=hashlib.sha256(body).digest(),
        payload=payload,
    ).id


def stripe_subscription_event(
    sub_id: str, *, created: int, status: str = "active"
) -> dict[str, Any]:
    return {
        "id": f"evt_{uuid.uuid4().hex[:16]}",
        "object": "event",
        "type": "customer.subscription.updated",
        "created": created,
        "data": {
            "object": {
                "id": sub_id,
                "object": "subscription",
                "customer": "cus_1",
                "status": status,
            }
        },
    }


def sqs_event(bodies: list[str]) -> dict[str, Any]:
    """An SQS event shaped like events/sqs-batch.json, one record per body, fresh message ids."""
    template = load_event("sqs-batch")["Records"][0]
    records = []
    for body in bodies:
        record = copy.deepcopy(template)
        record["messageId"] = str(uuid.uuid4())
        record["body"] = body
        records.append(record)
    return {"Records": records}


def sqs_event_for(row_ids: list[int]) -> dict[str, Any]:
    return sqs_event([json.dumps({"id": row_id}) for row_id in row_ids])


def failures(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def invoke(
    processor: ModuleType, event: dict[str, Any], context: FakeLambdaContext | None = None
) -> dict[str, Any]:
    result: dict[str, Any] = processor.handler(event, context or FakeLambdaContext())
    return result


def emitted_metrics(stdout: str) -> dict[str, list[float]]:
    """Metric name → values from the EMF lines Powertools printed."""
    found: dict[str, list[float]] = {}
    for line in stdout.splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or "_aws" not in document:
            continue
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                found.setdefault(metric["Name"], []).extend(
                    value if isinstance(value, list) else [value]
                )
    return found


def row(conn: psycopg.Connection[Any], row_id: int) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM webhook_events WHERE id = %s", (row_id,))
    values = cur.fetchone()
    assert values is not None
    return dict(zip([c.name for c in cur.description or ()], values, strict=True))


def due_rows(conn: psycopg.Connection[Any]) -> list[int]:
    """Every row due by now, oldest due first: what the queue and the sweeper would wake."""
    rows = conn.execute(
        "SELECT id FROM webhook_events WHERE status IN ('received', 'failed')"
        " AND available_at <= now() ORDER BY available_at, id"
    ).fetchall()
    return [r[0] for r in rows]


class Downstream:
    """What a handler calls: down until told otherwise; ``applied`` in the order it worked."""

    def __init__(self) -> None:
        self.up = False
        self.applied: list[int] = []

    def handler(self, conn: Any, event: Any) -> None:
        if not self.up:
            raise RetryableEventError("downstream answered 503")
        self.applied.append(event.id)
