"""Ingest's activity mark in the idle ledger (docs/design.md, "Idle means idle"): written before
the claim, at most once per window per execution environment, and never a reason to refuse a
delivery (real PostgreSQL, moto S3 and SQS)."""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from collections.abc import Iterator

import boto3
import pytest

from tests.integration.ingest.conftest import IngestHarness
from webhook_inbox import config, idle_ledger
from webhook_inbox.ingest import pipeline

BUCKET = "webhook-inbox-idleledger-test"


@pytest.fixture
def ledger(harness: IngestHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("IDLE_LEDGER_BUCKET", BUCKET)
    config.reset()
    idle_ledger._markers.clear()  # a fresh execution environment
    yield BUCKET
    idle_ledger._markers.clear()
    config.reset()


def _deliver(harness: IngestHarness) -> int:
    body = json.dumps({"id": f"evt_{uuid.uuid4().hex[:12]}", "type": "invoice.paid"}).encode()
    return harness.deliver("stripe", body, harness.sign("stripe", body)).status


def _until(bucket: str) -> float:
    answer = boto3.client("s3", region_name="us-east-1").get_object(
        Bucket=bucket, Key=idle_ledger.ACTIVITY_KEY
    )
    return float(json.loads(answer["Body"].read())["until"])


def test_a_delivery_marks_past_its_own_end_and_five_minutes_more(
    harness: IngestHarness, ledger: str
) -> None:
    before = time.time()
    assert _deliver(harness) == 202
    until = _until(ledger)
    assert before + pipeline.INGEST_HORIZON_S + idle_ledger.MARK_WINDOW_S <= until
    assert until <= time.time() + pipeline.INGEST_HORIZON_S + idle_ledger.MARK_WINDOW_S


def test_a_warm_environment_marks_once_per_window(harness: IngestHarness, ledger: str) -> None:
    assert _deliver(harness) == 202
    # Overwritten behind its back: a second delivery inside the window does not PUT again.
    boto3.client("s3", region_name="us-east-1").put_object(
        Bucket=ledger, Key=idle_ledger.ACTIVITY_KEY, Body=b'{"until": 0}'
    )
    assert _deliver(harness) == 202
    assert _until(ledger) == 0


def test_a_mark_that_fails_is_logged_and_the_delivery_is_accepted(
    harness: IngestHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDLE_LEDGER_BUCKET", "no-such-ledger-bucket")  # never created
    config.reset()
    idle_ledger._markers.clear()
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(harness.app.logger.registered_formatter)
    service_logger = harness.app.logger._logger
    service_logger.addHandler(handler)
    try:
        assert _deliver(harness) == 202
        assert _deliver(harness) == 202  # and the next invocation tries again
    finally:
        service_logger.removeHandler(handler)
        idle_ledger._markers.clear()
        config.reset()
    lines = [json.loads(line) for line in sink.getvalue().splitlines() if line.strip()]
    failed = [line for line in lines if line.get("activity_mark_failed")]
    assert [line["activity_mark_failed"] for line in failed] == ["NoSuchBucket", "NoSuchBucket"]
    assert all(line["message"] == "accepted" for line in failed)
    assert len(harness.queued()) == 2  # both stored and woken


def test_without_a_bucket_nothing_is_marked(harness: IngestHarness) -> None:
    """Local development and the tests' own stacks: no bucket, no S3 call at all."""
    assert _deliver(harness) == 202
    assert boto3.client("s3", region_name="us-east-1").list_buckets()["Buckets"] == []
