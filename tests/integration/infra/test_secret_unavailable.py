"""A database secret the processor or sweeper cannot read (issue 24 item 5, issue 27).

On 5276659 both let ``SecretUnavailable`` escape: the invocation failed (ProcessorErrors /
SweeperErrors) and nothing counted the cause. Now each writes ingest's line for it
(``unavailable``, reason ``secret``) and a ``SecretUnavailable`` count: one alarm
(SecretUnavailableAlarm) pages for all three functions, and the invocation does not fail.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.integration.processing.helpers import sqs_event
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import observability
from webhook_inbox.store import db

MISSING_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone-AbCdEf"


@pytest.fixture
def unreadable_secret(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The database secret names a secret that does not exist (moto's own
    ResourceNotFoundException); a queue exists for the functions that need one."""
    with mock_aws():
        url = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="q")["QueueUrl"]
        monkeypatch.setenv("PROCESSING_QUEUE_URL", url)
        monkeypatch.delenv("DATABASE_URL")
        monkeypatch.setenv("DATABASE_SECRET_ARN", MISSING_SECRET)
        db.reset_for_tests()
        yield url
    db.reset_for_tests()


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """Every line the functions' shared Powertools handler writes (EMF included)."""
    buffer = io.StringIO()
    handler = observability.lean_logger().registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(buffer)
    try:
        yield buffer
    finally:
        handler.setStream(previous)


def _parsed(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(text) for text in buffer.getvalue().splitlines() if text.startswith("{")]


def _emf_counts(lines: list[dict[str, Any]], name: str) -> list[float]:
    found: list[float] = []
    for line in lines:
        for directive in line.get("_aws", {}).get("CloudWatchMetrics", []):
            if name in {metric["Name"] for metric in directive["Metrics"]}:
                assert ["service"] in directive["Dimensions"]
                value = line[name]
                found += value if isinstance(value, list) else [value]
    return found


def _the_unavailable_line(lines: list[dict[str, Any]]) -> dict[str, Any]:
    (line,) = [line for line in lines if line["message"] == "unavailable"]
    assert (line["level"], line["reason"]) == ("ERROR", "secret")
    assert "cannot read database secret: ResourceNotFoundException" in line["detail"]
    return line


def test_the_processor_hands_its_batch_back_and_counts_the_secret(
    unreadable_secret: str, lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_ATTEMPTS", "3")
    processor = load_function("processor")
    event = sqs_event([json.dumps({"id": 1}), json.dumps({"id": 2}), "not a wake-up"])

    response = processor.handler(event, FakeLambdaContext())  # does not raise

    handed_back = [item["itemIdentifier"] for item in response["batchItemFailures"]]
    ids = [record["messageId"] for record in event["Records"]]
    assert handed_back == ids[:2]  # the poison body was acknowledged, as always
    parsed = _parsed(lines)
    _the_unavailable_line(parsed)
    assert _emf_counts(parsed, "SecretUnavailable") == [1.0]


def test_the_sweeper_skips_its_run_and_counts_the_secret(
    unreadable_secret: str, lines: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTBOX_DESTINATION", "eventbridge")
    monkeypatch.setenv("OUTBOX_EVENT_BUS_NAME", "default")
    sweeper = load_function("sweeper")

    result = sweeper.handler(load_event("schedule"), FakeLambdaContext())  # does not raise

    assert result == {"unavailable": "secret"}
    parsed = _parsed(lines)
    line = _the_unavailable_line(parsed)
    assert _emf_counts([line], "SecretUnavailable") == [1.0]
