"""Fixtures for the ingest function: sample providers, a moto queue, a frozen clock, deliver()."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.ingest_support import SHAPES, sample_config_text
from tests.support import FakeLambdaContext, load_function
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import providers
from webhook_inbox.store import credentials, db

# Extra providers the tests need beside the shipped sample ones.
ROTATING_SECRETS = ("whsec_new_rotation_secret", "whsec_old_rotation_secret")
KAT_SVIX_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
KAT_GITHUB_SECRET = "It's a Secret to Everybody"


def providers_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(sample_config_text())
    extra = {
        "rotating": {"scheme": "stripe", "secrets": [{"value": s} for s in ROTATING_SECRETS]},
        "kat-svix": {"scheme": "standard-webhooks", "secrets": [{"value": KAT_SVIX_SECRET}]},
        "kat-github": {"scheme": "github", "secrets": [{"value": KAT_GITHUB_SECRET}]},
        # Signs the id but no timestamp: the shape of issue 12's replay (ids carrying placeholders).
        "acme-signed-id": {
            "scheme": "hmac-sha256",
            "secrets": [{"value": "acme-signed-id-secret"}],
            "options": {
                "signature_header": "X-Acme-Signature",
                "id_header": "X-Acme-Event-Id",
                "signed_content": "{id}.{body}",
            },
        },
        # The id and the timestamp side by side, no separator: the audit's zero-moving replay.
        "acme-adjacent": {
            "scheme": "hmac-sha256",
            "secrets": [{"value": "acme-adjacent-secret"}],
            "options": {
                "signature_header": "X-Acme-Signature",
                "id_header": "X-Acme-Event-Id",
                "timestamp_header": "X-Acme-Timestamp",
                "signed_content": "{id}{timestamp}.{body}",
            },
        },
        "svix-headers": {
            "scheme": "standard-webhooks",
            "secrets": config["providers"]["svix"]["secrets"],
            "options": {"header_prefix": "svix"},
        },
    }
    config["providers"].update(extra)
    return config


def secret_of(name: str, config: dict[str, Any] | None = None) -> str:
    value: str = (config or providers_config())["providers"][name]["secrets"][0]["value"]
    return value


@pytest.fixture(scope="session")
def ingest_app() -> ModuleType:
    return load_function("ingest")


@dataclass
class Reply:
    status: int
    body: Any
    raw: dict[str, Any]


@dataclass
class IngestHarness:
    app: ModuleType
    queue_url: str
    sqs: Any
    now: int
    # Digests of every body a test signed (the property test: only these may be stored).
    signed_digests: set[bytes] = field(default_factory=set)

    def deliver(
        self,
        provider: str,
        body: bytes,
        headers: dict[str, str],
        *,
        shape: str = "v2",
        base64_body: bool = False,
    ) -> Reply:
        event = SHAPES[shape](provider, body, headers, base64_body=base64_body)
        return self.invoke(event)

    def invoke(self, event: Any) -> Reply:
        """The reply, its body parsed when it is JSON (a provider's own acknowledgement, such
        as Twilio's TwiML, stays text)."""
        raw = self.app.handler(event, FakeLambdaContext())
        body = raw["body"]
        if raw["headers"].get("Content-Type") == "application/json":
            body = json.loads(body)
        return Reply(raw["statusCode"], body, raw)

    def sign(self, provider: str, body: bytes, **kwargs: Any) -> dict[str, str]:
        kwargs.setdefault("timestamp", self.now)
        return providers.sign_delivery(providers.registry()[provider], body, **kwargs).headers

    def queued(self) -> list[dict[str, Any]]:
        """Drain the processing queue (bounded) and return the message bodies."""
        found: list[dict[str, Any]] = []
        for _ in range(10):
            batch = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0
            ).get("Messages", [])
            if not batch:
                break
            for message in batch:
                found.append(json.loads(message["Body"]))
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
        return found


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture
def harness(
    ingest_app: ModuleType,
    database_url: str,
    aws: None,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[IngestHarness]:
    """DATABASE_URL, PROVIDERS_CONFIG, a moto queue and a frozen clock for one test."""
    sqs = boto3.client("sqs")
    queue_url = sqs.create_queue(QueueName="processing")["QueueUrl"]
    monkeypatch.setenv("PROCESSING_QUEUE_URL", queue_url)
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(providers_config()))
    monkeypatch.delenv("PROVIDERS_CONFIG_FILE", raising=False)
    monkeypatch.delenv("MAX_BODY_BYTES", raising=False)
    now = int(time.time())
    monkeypatch.setattr(ingest, "current_time", lambda: float(now))
    providers.reset_for_tests()
    ingest_app.reset_clients()
    yield IngestHarness(ingest_app, queue_url, sqs, now)
    providers.reset_for_tests()
    ingest_app.reset_clients()


@pytest.fixture
def dev_gateway(harness: IngestHarness) -> Iterator[str]:
    """The gateway of `webhook-inbox dev` in front of one ingest environment: this process's
    handler, served on a thread through the same pipe protocol as a dev worker process."""
    # Through the CLI, as `webhook-inbox dev` imports it: the gateway imported first closes a
    # cycle (gateway -> cli -> cli.dev -> dev.sam_env -> dev.stack -> gateway).
    import webhook_inbox_tools.cli  # noqa: F401
    from webhook_inbox_tools.dev.gateway import IngestGateway

    ours, theirs = multiprocessing.Pipe()

    def serve() -> None:
        while True:
            try:
                event = theirs.recv()
            except (EOFError, OSError):
                return
            # (response, outcome summary): the summary only feeds the console's line.
            theirs.send((harness.app.handler(event, FakeLambdaContext()), None))

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    gateway = IngestGateway("127.0.0.1", 0)
    gateway.start([ours])
    try:
        yield f"http://127.0.0.1:{gateway.port}"
    finally:
        gateway.stop()
        ours.close()
        worker.join(timeout=5)
        theirs.close()


@pytest.fixture
def connection_per_thread(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Any]]:
    """db.get_connection gives each thread its own connection, as concurrent Lambda execution
    environments each have theirs; every one is closed after the test."""
    local = threading.local()
    opened: list[psycopg.Connection[Any]] = []
    opened_lock = threading.Lock()

    def per_thread_connection(application_name: str = "webhook-inbox") -> Any:
        if getattr(local, "conn", None) is None:
            conninfo = credentials.database_conninfo(db.settings())
            local.conn = db.connect(conninfo, application_name=application_name)
            with opened_lock:
                opened.append(local.conn)
        return local.conn

    monkeypatch.setattr(db, "get_connection", per_thread_connection)
    try:
        yield per_thread_connection
    finally:
        for connection in opened:
            connection.close()


def row_count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM webhook_events").fetchone()
    assert row is not None
    return int(row[0])
