"""Fixtures for the processor: moto SQS, the function module, stored events, captured output."""

from __future__ import annotations

import copy
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.support import load_function
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing import handlers


@dataclass
class RetryQueue:
    """The processing queue (moto) plus every SendMessageBatch the processor made to it."""

    url: str
    client: Any
    sent_batches: list[list[dict[str, Any]]] = field(default_factory=list)

    def sent_entries(self) -> list[dict[str, Any]]:
        return [entry for batch in self.sent_batches for entry in batch]


@pytest.fixture
def retry_queue(monkeypatch: pytest.MonkeyPatch) -> Iterator[RetryQueue]:
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        url = client.create_queue(QueueName="webhook-inbox-processing")["QueueUrl"]
        queue = RetryQueue(url=url, client=client)

        def record(params: dict[str, Any], **_: Any) -> None:
            queue.sent_batches.append(copy.deepcopy(params["Entries"]))

        client.meta.events.register("provide-client-params.sqs.SendMessageBatch", record)
        monkeypatch.setattr(processing, "sqs_client", lambda: client)
        monkeypatch.setenv("PROCESSING_QUEUE_URL", url)
        yield queue


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], Any]:
    """The handler registry, restored after the test (tests register failing handlers)."""
    snapshot = dict(handlers.HANDLERS)
    monkeypatch.setattr(handlers, "HANDLERS", snapshot)
    return snapshot


@pytest.fixture
def processor(
    database_url: str,
    retry_queue: RetryQueue,
    registry: dict[tuple[str, str], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> ModuleType:
    """functions/processor/app.py, loaded as SAM would, against this test's database and queue."""
    monkeypatch.setenv("MAX_ATTEMPTS", "3")
    monkeypatch.setenv("RETRY_BASE_SECONDS", "5")
    monkeypatch.setenv("RETRY_MAX_SECONDS", "3600")
    return load_function("processor")


@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    """Everything the processor logs during the test (Powertools JSON lines)."""
    buffer = io.StringIO()
    handler = processing.logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(buffer)
    try:
        yield buffer
    finally:
        handler.setStream(previous)
