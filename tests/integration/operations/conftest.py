"""The operator function in-process: Function URL events as AWS builds them for an IAM-signed
request (the caller in ``requestContext.authorizer.iam``), the real handler, this test's
database and a moto queue."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.integration.cli.conftest import Queue
from tests.support import FakeLambdaContext, load_function
from webhook_inbox import aws, config, observability
from webhook_inbox.store import db
from webhook_inbox_tools.dev.apigw import function_url_event

ALICE = "arn:aws:iam::123456789012:user/alice"


@dataclass
class Reply:
    status: int
    body: Any
    log: dict[str, Any] = field(default_factory=dict)

    @property
    def result(self) -> Any:
        assert self.status == 200, self.body
        return self.body["result"]

    @property
    def error(self) -> str:
        assert self.status != 200, self.body
        return str(self.body["error"])


@dataclass
class OperatorFunction:
    """``call(level, body)``: one request to OperatorReadFunction or OperatorActFunction."""

    app: ModuleType
    queue: Queue
    monkeypatch: pytest.MonkeyPatch
    lines: io.StringIO

    def event(self, body: Any, *, who: str | None = ALICE, raw: bytes | None = None) -> Any:
        data = raw if raw is not None else json.dumps(body).encode()
        event = function_url_event(
            path="/",
            query="",
            headers=[("content-type", "application/json"), ("host", "abc.lambda-url.on.aws")],
            body=data,
            source_ip="198.51.100.7",
            caller=who or "",
        )
        if who is None:  # what a direct lambda:Invoke would carry: no caller AWS authenticated
            del event["requestContext"]["authorizer"]
        return event

    def call(self, level: str, body: Any = None, **options: Any) -> Reply:
        event = options.pop("event", None) or self.event(body, **options)
        self.monkeypatch.setenv("OPERATOR_LEVEL", level)
        config.reset()  # a new execution environment of the other function
        self.lines.seek(0)
        self.lines.truncate()
        response = self.app.handler(event, FakeLambdaContext())
        logged = [json.loads(line) for line in self.lines.getvalue().splitlines() if line]
        (line,) = [entry for entry in logged if entry.get("message") == "operator"]
        return Reply(int(response["statusCode"]), json.loads(response["body"]), line)


@pytest.fixture
def operator(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[OperatorFunction]:
    handler = observability.lean_logger().registered_handler
    assert isinstance(handler, logging.StreamHandler)
    lines = io.StringIO()
    previous, handler.stream = handler.stream, lines  # not setStream: it flushes the old one
    aws.reset()
    try:
        with mock_aws():
            client = boto3.client("sqs", region_name="us-east-1")
            url = client.create_queue(QueueName="processing")["QueueUrl"]
            monkeypatch.setenv("PROCESSING_QUEUE_URL", url)
            yield OperatorFunction(
                load_function("operator"), Queue(url, client), monkeypatch, lines
            )
    finally:
        handler.stream = previous
        aws.reset()
        db.reset_for_tests()
