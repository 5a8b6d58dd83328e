"""Regression guard: CloudWatch Logs bytes per webhook, the largest cost after the per-request
charges (issue 18; bench/cost_bill.py prices them).

The real handlers run in-process over a real PostgreSQL and moto: 20 new Stripe deliveries and 2
duplicates, the stored rows in two processor batches of 10, one sweep. Everything the functions
write is captured: the shared Powertools handler's stream (every function's log lines and the
metrics the processor and sweeper embed) and stdout (the sweeper's per-status BacklogCount
documents). The runtime's own lines (platform.start and platform.report) are counted as the
template's LoggingConfig keeps them, rendered as bench/cost_bill.py renders them: at the defaults
the processor's report is kept (the evidence of a timeout or a memory kill, shared by a batch of
ten) and ingest's is not (it writes its own evidence), and the total per webhook stays under 400 B.
Line counts and field sets are exact; bytes vary only with the width of measured numbers
(durations, latencies, row ids), so the byte bounds are exact figures with a few bytes of room,
far below any added field.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator

import boto3
import psycopg
import pytest
from moto import mock_aws

from bench.cost_bill import Deployment, platform_lines
from bench.cost_child import ROOT, _stripe_id
from bench.stripe_events import stripe_body
from tests.ingest_support import v2_event
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import providers
from webhook_inbox.processing import batch as processing
from webhook_inbox.store import db

# Bytes per stored event (its deliveries, a tenth of a batch, the sweep spread over the mix).
INGEST_BYTES_PER_WEBHOOK = 170  # 22 lines of 150 B for 20 events (no row id: the event id's)
PROCESSOR_BYTES_PER_WEBHOOK = 72  # one ~0.67 KB summary per batch listing its ten row ids
# The sweeper runs once a minute whatever the traffic: bytes per run.
SWEEPER_BYTES_PER_RUN = 2_500
# Everything per webhook at the template's defaults, Lambda's own lines included as its
# LoggingConfig keeps them: ingest's and the processor's lines and reports (22 deliveries and
# 2 batches for 20 webhooks).
BYTES_PER_WEBHOOK = 400

# INFO lines carry no ``level`` (Lambda reads a line without one as INFO).
INGEST_FIELDS = {"message", "timestamp", "service", "provider", "event_id"}
BATCH_FIELDS = {
    "message", "timestamp", "request_id", "records", "leased", "redelivered",
    "duration_ms", "processed", "_aws", "service", "Processed", "ProcessingLatency",
}  # fmt: skip


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    handler = processing.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(buffer)
    try:
        yield buffer
    finally:
        handler.setStream(previous)


def _take(buffer: io.StringIO, capsys: pytest.CaptureFixture[str]) -> list[str]:
    lines = buffer.getvalue().splitlines() + capsys.readouterr().out.splitlines()
    buffer.seek(0)
    buffer.truncate()
    return [line for line in lines if line.startswith("{")]


def _size(lines: list[str]) -> int:
    return sum(len(line.encode()) + 1 for line in lines)  # each with its newline


def test_log_bytes_per_webhook_stay_within_the_budget(
    database_url: str,
    captured: io.StringIO,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue = sqs.create_queue(QueueName="processing")["QueueUrl"]
        for name, value in {
            "PROVIDERS_CONFIG_FILE": "events/providers.local.json",
            "PROCESSING_QUEUE_URL": queue,
            "POWERTOOLS_METRICS_NAMESPACE": "WebhookInbox",  # the template's namespace
            "OUTBOX_DESTINATION": "eventbridge",
            "OUTBOX_EVENT_BUS_NAME": "default",
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("PROVIDERS_CONFIG", raising=False)
        monkeypatch.setattr(processing, "sqs_client", lambda: sqs)
        providers.reset_for_tests()
        db.reset_for_tests()
        now = int(time.time())
        monkeypatch.setattr(ingest, "current_time", lambda: float(now))
        ingest_app, processor_app, sweeper_app = (
            load_function(name) for name in ("ingest", "processor", "sweeper")
        )
        ingest_app.reset_clients()
        stripe = providers.registry()["stripe"]
        events = []
        for _ in range(20):
            body = stripe_body(_stripe_id(), now)
            events.append(v2_event("stripe", body, providers.sign_delivery(stripe, body).headers))
        for event in events + events[:2]:
            assert ingest_app.handler(event, FakeLambdaContext())["statusCode"] in {200, 202}
        ingest_lines = _take(captured, capsys)

        # The rows' ids, by event id (an id carries its day: no counting from 1).
        with psycopg.connect(database_url) as conn:
            row_of = dict(conn.execute("SELECT event_id, id FROM webhook_events").fetchall())
        row_ids = sorted(row_of.values())
        assert len(row_ids) == 20
        for first in (0, 10):
            batch = {"Records": [
                {"messageId": f"m{i}", "body": json.dumps({"id": i})}
                for i in row_ids[first : first + 10]
            ]}  # fmt: skip
            assert processor_app.handler(batch, FakeLambdaContext()) == {"batchItemFailures": []}
        processor_lines = _take(captured, capsys)

        sweeper_app.handler(load_event("schedule"), FakeLambdaContext())
        sweeper_lines = _take(captured, capsys)
        providers.reset_for_tests()
        db.reset_for_tests()

    # One line per delivery (metric filters count it), one per batch.
    assert len(ingest_lines) == 22
    parsed = [json.loads(line) for line in ingest_lines]
    assert set(parsed[0]) == INGEST_FIELDS
    # Processed events are listed in their batch's summary by row id; the row pairs it with the
    # event id ingest's line names (and holds the rest).
    assert len(processor_lines) == 2
    batches = [json.loads(line) for line in processor_lines]
    assert all(set(batch) == BATCH_FIELDS for batch in batches)
    listed = [row_id for batch in batches for row_id in batch["processed"]]
    assert sorted(listed) == row_ids
    assert set(listed) == {row_of[json.loads(line)["event_id"]] for line in ingest_lines}
    # The summary; no BacklogCount document, since every status's count is zero at this point
    # and zeros are not published.
    assert len(sweeper_lines) == 1

    assert _size(ingest_lines) / 20 <= INGEST_BYTES_PER_WEBHOOK, ingest_lines[0]
    assert _size(processor_lines) / 20 <= PROCESSOR_BYTES_PER_WEBHOOK, processor_lines[0]
    assert _size(sweeper_lines) <= SWEEPER_BYTES_PER_RUN, sweeper_lines[0]

    # With Lambda's lines as the template keeps them (bench/cost_bill.py renders them the same way).
    template = Deployment.of(ROOT)
    runtime = {
        function: _size(
            platform_lines(
                template.logging[function],
                duration_ms=12.345,
                memory_mb=template.memory_mb[function],
                used_mb=99,
                init_ms=None,
            )
        )
        for function in ("ingest", "processor")
    }
    total = _size(ingest_lines) + 22 * runtime["ingest"]
    total += _size(processor_lines) + 2 * runtime["processor"]
    assert total / 20 <= BYTES_PER_WEBHOOK, (runtime, total / 20)
