"""A 10-second database outage, for real: the dedicated server is stopped and started again.

Ingest must answer 503 within its connect timeout for the whole outage (never hang), and every
retry the provider makes after the outage must be accepted exactly once. Processors must give
their whole batch back to SQS and mark nothing processed without its domain change.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.ingest_support import v2_event
from tests.reliability.infra import DedicatedPostgres
from tests.reliability.soak import SOAK_PROVIDERS
from tests.support import FakeLambdaContext, load_function
from webhook_inbox.ingest import providers
from webhook_inbox.processing import batch as processing
from webhook_inbox.store import db

OUTAGE_SECONDS = 10.0
CONNECT_TIMEOUT_S = 1
# Each answer during the outage is bounded by the connect timeout plus the request's own work.
ANSWER_BOUND_S = CONNECT_TIMEOUT_S + 0.5


@pytest.fixture
def outage_env(
    dedicated_pg: DedicatedPostgres, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    url = dedicated_pg.create_migrated_database(f"outage_{uuid.uuid4().hex[:8]}")
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url = sqs.create_queue(QueueName="processing")["QueueUrl"]
        for name, value in {
            "DATABASE_URL": url,
            "DB_CONNECT_TIMEOUT_S": str(CONNECT_TIMEOUT_S),
            "DB_STATEMENT_TIMEOUT_MS": "2000",
            "PROVIDERS_CONFIG": json.dumps(SOAK_PROVIDERS),
            "PROCESSING_QUEUE_URL": queue_url,
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("PROVIDERS_CONFIG_FILE", raising=False)
        db.reset_for_tests()
        providers.reset_for_tests()
        ingest = load_function("ingest")
        ingest.reset_clients()
        monkeypatch.setattr(processing, "sqs_client", lambda: sqs)
        processor = load_function("processor")
        try:
            yield {"url": url, "ingest": ingest, "processor": processor, "sqs": sqs}
        finally:
            if not dedicated_pg.running:
                dedicated_pg.start()
            db.reset_for_tests()
            providers.reset_for_tests()


def _delivery(n: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {
            "type": "subscription.updated",
            "data": {"id": f"sub_outage_{n}", "status": "active", "version": 1},
        }
    ).encode()
    headers = providers.sign_delivery(
        providers.registry()["example"], body, event_id=f"msg_outage_{n}"
    ).headers
    return body, headers


def _post(ingest: ModuleType, n: int) -> tuple[int, float]:
    body, headers = _delivery(n)
    started = time.monotonic()
    reply = ingest.handler(v2_event("example", body, headers), FakeLambdaContext())
    return reply["statusCode"], time.monotonic() - started


def _sqs_event(row_ids: list[int]) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"m-{row_id}",
                "receiptHandle": f"r-{row_id}",
                "body": json.dumps({"id": row_id}),
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:processing",
                "awsRegion": "us-east-1",
            }
            for row_id in row_ids
        ]
    }


def _facts(url: str) -> tuple[int, int, int]:
    """(rows, processed rows, processed rows whose subscription does not carry them)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            """SELECT count(*),
                      count(*) FILTER (WHERE e.status = 'processed'),
                      count(*) FILTER (WHERE e.status = 'processed'
                                         AND s.source_event_id IS DISTINCT FROM e.event_id)
                 FROM webhook_events e
                 LEFT JOIN subscriptions s
                        ON s.provider = e.provider
                       AND s.subscription_id = e.payload #>> '{data,id}'"""
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def test_a_ten_second_outage_answers_503_fast_and_every_retry_is_accepted_after(
    dedicated_pg: DedicatedPostgres, outage_env: dict[str, Any]
) -> None:
    ingest, processor, url = outage_env["ingest"], outage_env["processor"], outage_env["url"]
    # Before the outage: three events stored (the ingest process holds a warm connection).
    assert [_post(ingest, n)[0] for n in range(3)] == [202, 202, 202]
    with psycopg.connect(url) as conn:
        stored_ids = [r[0] for r in conn.execute("SELECT id FROM webhook_events ORDER BY id")]

    dedicated_pg.stop()
    outage_started = time.monotonic()
    answers: list[tuple[int, float]] = []
    batch_answers: list[tuple[list[str], float]] = []
    while time.monotonic() - outage_started < OUTAGE_SECONDS:
        # The provider keeps trying deliveries 3..7 (new events) during the outage.
        answers.append(_post(ingest, 3 + len(answers) % 5))
        started = time.monotonic()
        response = processor.handler(_sqs_event(stored_ids), FakeLambdaContext(remaining_ms=0))
        batch_answers.append(
            (
                [f["itemIdentifier"] for f in response["batchItemFailures"]],
                time.monotonic() - started,
            )
        )
        time.sleep(0.25)
    dedicated_pg.start()

    print(
        f"outage {OUTAGE_SECONDS:.0f} s: {len(answers)} ingest answers, all 503, slowest "
        f"{max(s for _, s in answers) * 1000:.0f} ms; {len(batch_answers)} processor batches, "
        f"slowest {max(s for _, s in batch_answers) * 1000:.0f} ms"
    )
    assert len(answers) >= 10
    assert {status for status, _ in answers} == {503}
    slowest = max(seconds for _, seconds in answers)
    assert slowest < ANSWER_BOUND_S, f"an answer took {slowest:.2f} s during the outage"
    # Every processor invocation during the outage gave its whole batch back to SQS, fast.
    expected = sorted(f"m-{row_id}" for row_id in stored_ids)
    assert all(sorted(failed) == expected for failed, _ in batch_answers)
    assert max(seconds for _, seconds in batch_answers) < ANSWER_BOUND_S
    assert _facts(url) == (3, 0, 0)  # nothing stored during the outage, nothing processed

    # After the outage the provider's retries (deliveries 3..7) are all accepted, once each.
    assert [_post(ingest, n)[0] for n in range(3, 8)] == [202] * 5
    assert [_post(ingest, n)[0] for n in range(3, 8)] == [200] * 5
    with psycopg.connect(url) as conn:
        all_ids = [r[0] for r in conn.execute("SELECT id FROM webhook_events ORDER BY id")]
    response = processor.handler(_sqs_event(all_ids), FakeLambdaContext())
    assert response["batchItemFailures"] == []
    assert _facts(url) == (8, 8, 0)  # every event processed, each with its domain change
