"""Fixtures for the CLI tests: seeded inbox rows in any state, a moto queue, a CLI runner, the
real ingest handler over the sample providers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.support import ROOT, load_function
from webhook_inbox.ingest import providers
from webhook_inbox.store import inbox
from webhook_inbox_tools.cli import main

CONSOLE_SCRIPT = Path(sys.executable).parent / "webhook-inbox"


def seed_event(
    conn: psycopg.Connection[Any],
    event_id: str,
    *,
    provider: str = "stripe",
    event_type: str = "customer.created",
    status: str = "received",
    attempts: int = 0,
    lease_seconds: float | None = None,
    error: str | None = None,
) -> int:
    """An inbox row in the given state, written the way the pipeline would leave it."""
    body = json.dumps({"id": event_id, "type": event_type}).encode()
    claimed = inbox.claim_event(
        conn,
        provider=provider,
        event_id=event_id,
        event_type=event_type,
        body_sha256=hashlib.sha256(body).digest(),
        payload=json.loads(body),
    )
    leased = status == "processing"
    conn.execute(
        "UPDATE webhook_events SET status = %(status)s, attempts = %(attempts)s,"
        " lease_owner = CASE WHEN %(leased)s THEN 'worker-1' END,"
        " lease_expires_at = CASE WHEN %(leased)s"
        "     THEN now() + make_interval(secs => %(lease)s) END,"
        " error_kind = CASE WHEN %(error)s::text IS NOT NULL THEN 'handler_error' END,"
        " last_error = %(error)s,"
        " processed_at = CASE WHEN %(status)s IN ('processed', 'ignored') THEN now() END"
        " WHERE id = %(id)s",
        {
            "status": status,
            "attempts": attempts,
            "leased": leased,
            "lease": lease_seconds if lease_seconds is not None else 60.0,
            "error": error,
            "id": claimed.id,
        },
    )
    return claimed.id


def seed_outbox(
    conn: psycopg.Connection[Any], key: str, *, status: str = "pending", attempts: int = 0
) -> int:
    row = conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload, status, attempts,"
        " published_at, last_error)"
        " VALUES ('customer.created', %s, '{}'::jsonb, %s, %s,"
        "  CASE WHEN %s = 'published' THEN now() END,"
        "  CASE WHEN %s = 'dead' THEN 'bus unavailable' END) RETURNING id",
        (key, status, attempts, status, status),
    ).fetchone()
    assert row is not None
    return int(row[0])


def table_snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[Any]]:
    """Every row of the tables an operator command could touch."""
    return {
        table: conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()  # noqa: S608
        for table in ("webhook_events", "outbox_messages", "operator_actions")
    }


@dataclass
class Queue:
    url: str
    client: Any

    def drain(self) -> list[dict[str, Any]]:
        """Every message body now on the queue (bounded: a handful of receive calls)."""
        bodies: list[dict[str, Any]] = []
        for _ in range(20):
            reply = self.client.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10)
            messages = reply.get("Messages", [])
            if not messages:
                break
            for message in messages:
                bodies.append(json.loads(message["Body"]))
                self.client.delete_message(
                    QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"]
                )
        return bodies


@pytest.fixture
def queue() -> Iterator[Queue]:
    with mock_aws():
        client = boto3.client("sqs", region_name="us-east-1")
        url = client.create_queue(QueueName="processing")["QueueUrl"]
        yield Queue(url, client)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Any:
    """Run the CLI in-process (so moto's mock applies); ``stdin`` feeds confirmations."""
    monkeypatch.setenv("USER", "test-operator")
    monkeypatch.delenv("PROCESSING_QUEUE_URL", raising=False)

    def run(*argv: str, stdin: str = "") -> Result:
        import io

        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def run_console_script(
    *argv: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """The installed ``webhook-inbox`` script in a subprocess, as a user would run it."""
    full_env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    full_env.update(env or {})
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *argv],
        env=full_env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def ingest_env(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, Any, str]]:
    """The real ingest function with the sample providers, this test's database and a moto queue."""
    from webhook_inbox.ingest import pipeline as ingest

    monkeypatch.setenv("PROVIDERS_CONFIG_FILE", str(ROOT / "events" / "providers.local.json"))
    monkeypatch.delenv("PROVIDERS_CONFIG", raising=False)
    providers.reset_for_tests()
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="processing")["QueueUrl"]
        monkeypatch.setenv("PROCESSING_QUEUE_URL", url)
        app = load_function("ingest")
        app.reset_clients()
        yield app, sqs, url
        app.reset_clients()
    providers.reset_for_tests()
    assert ingest is not None
