"""No secret and no payload text in any log line, across a representative run of every function.

Ingest (every sample provider: accepted, duplicate, bad signature, stale, bad JSON, oversized,
unknown provider, database down), processor (processed, a handler error that quotes the
payload, poison, database down) and sweeper (re-enqueue, publish, publish failure, database
down) run in-process while every log record of every logger and everything written to stdout
and stderr (Powertools JSON lines, EMF metrics) is captured. None may contain a provider secret
from events/providers.local.json, the database password, or the marker planted in payloads.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg.conninfo import make_conninfo

from tests.ingest_support import rebuilt_url, sample_config_text, shaped_sample_body, v2_event
from tests.reliability.infra import DB_PASSWORD_MARKER
from tests.support import FakeLambdaContext, load_function
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import providers
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing import handlers
from webhook_inbox.store import db

MARKER = "PAYLOAD-MARKER-7c1d-card-4242"
SAMPLE = json.loads(sample_config_text())
SECRETS = [
    secret["value"]
    for provider in SAMPLE["providers"].values()
    for secret in provider["secrets"]
    if "value" in secret
]
UNREACHABLE_URL = make_conninfo(
    "postgresql://postgres@/postgres",
    host="/nonexistent-socket-dir",
    password=DB_PASSWORD_MARKER,
)


class EveryRecord(logging.Handler):
    """Keeps each record's message and every attribute (Powertools puts extras there)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.lines.append(text + " " + json.dumps(record.__dict__, default=str))


@pytest.fixture
def every_record() -> Iterator[EveryRecord]:
    handler = EveryRecord()
    attached = [logging.getLogger()]
    try:
        yield handler
    finally:
        for logger in attached:
            logger.removeHandler(handler)


def _attach_everywhere(handler: EveryRecord) -> None:
    """Root plus every logger that does not propagate (Powertools loggers do not)."""
    loggers = [logging.getLogger()] + [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        if handler not in logger.handlers:
            logger.addHandler(handler)


def _body(event_id: str, provider: str) -> bytes:
    shaped = shaped_sample_body(provider, event_id, MARKER)
    if shaped is not None:
        return shaped
    document: dict[str, Any] = {
        "id": event_id,
        "type": "customer.created",
        "event_id": event_id,
        "event": {"type": "message"},
        "created": int(time.time()),
        "data": {"object": {"id": f"cus_{event_id}", "note": MARKER}, "note": MARKER},
    }
    if provider == "slack":
        document["type"] = "event_callback"
    if provider == "paddle":
        document["event_type"] = "customer.created"
    if provider == "hubspot":  # a batch of events
        return json.dumps([dict(document, subscriptionType="contact.creation")]).encode()
    return json.dumps(document).encode()


def _sqs_event(bodies: list[str]) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"m{i}",
                "receiptHandle": f"r{i}",
                "body": body,
                "attributes": {},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:processing",
                "awsRegion": "us-east-1",
            }
            for i, body in enumerate(bodies)
        ]
    }


def _run_ingest(app: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = providers.registry()
    for n, name in enumerate(sorted(SAMPLE["providers"])):
        body = _body(f"evt_log_{n}", name)
        signed = providers.sign_delivery(
            registry[name],
            body,
            event_id=f"msg_log_{n}",
            event_type="orders/create",
            url=rebuilt_url("v2", name),  # what URL-signed senders sign
        )
        headers, query = signed.headers, urlsplit(signed.url).query
        for _ in range(2):  # accepted, then a duplicate
            app.handler(v2_event(name, body, headers, query=query), FakeLambdaContext())
        wrong = {
            k: v[:-3] + "abc" if "ignature" in k or "Hmac" in k else v for k, v in headers.items()
        }
        app.handler(v2_event(name, body, wrong), FakeLambdaContext())
        stale = providers.sign_delivery(
            registry[name], body, event_id=f"msg_log_{n}", timestamp=int(time.time()) - 3600
        ).headers
        app.handler(v2_event(name, body, stale), FakeLambdaContext())
        not_json = MARKER.encode() + b" {"
        app.handler(
            v2_event(name, not_json, providers.sign_delivery(registry[name], not_json).headers),
            FakeLambdaContext(),
        )
    app.handler(v2_event("nobody", _body("x", "x"), {}), FakeLambdaContext())
    monkeypatch.setenv("MAX_BODY_BYTES", "64")
    app.reset_clients()  # settings are read once per execution environment: start a new one
    app.handler(v2_event("stripe", _body("big", "stripe"), {}), FakeLambdaContext())
    monkeypatch.delenv("MAX_BODY_BYTES")
    app.reset_clients()


def _run_processor(
    app: Any, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def quotes_the_payload(c: Any, event: Any) -> None:
        raise KeyError(event.payload["data"]["note"])  # a careless handler

    registry = dict(handlers.HANDLERS)
    registry[("acme", "customer.created")] = quotes_the_payload
    monkeypatch.setattr(handlers, "HANDLERS", registry)
    ids = [r[0] for r in conn.execute("SELECT id FROM webhook_events ORDER BY id")]
    bodies = [json.dumps({"id": i}) for i in ids] + [MARKER, json.dumps({"id": MARKER})]
    app.handler(_sqs_event(bodies), FakeLambdaContext())


def test_no_secret_or_payload_text_reaches_any_log_line(
    database_url: str,
    conn: psycopg.Connection[Any],
    every_record: EveryRecord,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url_with_password = make_conninfo(database_url, password=DB_PASSWORD_MARKER)
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queue_url = sqs.create_queue(QueueName="processing")["QueueUrl"]
        for name, value in {
            "DATABASE_URL": url_with_password,
            "PROVIDERS_CONFIG": json.dumps(SAMPLE),
            "PROCESSING_QUEUE_URL": queue_url,
            "POWERTOOLS_LOG_LEVEL": "DEBUG",
            "OUTBOX_DESTINATION": "eventbridge",
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("PROVIDERS_CONFIG_FILE", raising=False)
        monkeypatch.setattr(ingest, "current_time", time.time)
        monkeypatch.setattr(processing, "sqs_client", lambda: sqs)
        providers.reset_for_tests()
        db.reset_for_tests()
        ingest_app, processor_app, sweeper_app = (
            load_function(name) for name in ("ingest", "processor", "sweeper")
        )
        ingest_app.reset_clients()
        _attach_everywhere(every_record)

        _run_ingest(ingest_app, monkeypatch)
        _run_processor(processor_app, conn, monkeypatch)
        # A pending outbox message whose payload carries the marker, and a failing publish.
        conn.execute(
            "INSERT INTO outbox_messages (topic, deduplication_key, payload)"
            " VALUES ('t', 'k-1', %s), ('t', 'k-2', %s)",
            (json.dumps({"note": MARKER}), json.dumps({"note": MARKER, "x": "y" * 300_000})),
        )
        conn.execute("UPDATE webhook_events SET enqueued_at = NULL")
        sweeper_app.handler({"source": "aws.events"}, FakeLambdaContext())

        # Everything again with the database unreachable.
        monkeypatch.setenv("DATABASE_URL", UNREACHABLE_URL)
        db.reset_for_tests()
        _run_ingest(ingest_app, monkeypatch)
        processor_app.handler(_sqs_event([json.dumps({"id": 1})]), FakeLambdaContext())
        db.reset_for_tests()
        ended = sweeper_app.handler({"source": "aws.events"}, FakeLambdaContext())
        assert ended == {"unavailable": "store"}
        db.reset_for_tests()
        providers.reset_for_tests()

    captured = capfd.readouterr()
    lines = every_record.lines + (captured.out + captured.err).splitlines()
    assert len(every_record.lines) > 50  # the capture really saw the run
    # Every path really ran: ingest's and the processor's lines are named after their outcome;
    # processed events are listed in their batch's line.
    messages = {line.split(" ", 1)[0] for line in every_record.lines}
    for outcome in ("accepted", "duplicate", "rejected", "unavailable", "failed"):
        assert outcome in messages, outcome
    assert any('"processed": [[' in line for line in every_record.lines)
    leaks = [
        (needle[:10], line[:200])
        for line in lines
        for needle in (*SECRETS, DB_PASSWORD_MARKER, MARKER)
        if needle in line
    ]
    assert leaks == []
