"""Ingest when AWS misbehaves: SQS and Secrets Manager behind the fault proxy (a moto server).

Issue 14, defects 2 and 3. An SQS endpoint that accepts the connection and never answers must
not keep ingest past its 8 s timeout (the row is durable: 202, and the stamp is cleared so the
sweeper sends it). A secret that cannot be read — the database's or a provider's, throttled,
refused, missing or hanging — is a 503 with ``Retry-After`` and a ``SecretUnavailable`` metric,
never a 500. A database secret rotated under a running function is re-read once when the
database refuses the cached credentials, and not more often than once a minute.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import psycopg
import pytest
from botocore.awsrequest import AWSResponse
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.faults.fixtures import MotoEndpoint
from tests.faults.proxy import FaultProxy
from tests.infra_support import metric_filters
from tests.integration.ingest.conftest import (
    IngestHarness,
    providers_config,
    row_count,
    secret_of,
)
from webhook_inbox import aws
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import providers
from webhook_inbox.store import db

# Lambda kills ingest at its timeout (template: 8 s); every answer must come well before.
INGEST_TIMEOUT_S = 8.0
# Signs deliveries with the providers' own values, whatever the function under test reads.
SIGNER = providers.load_config_text(json.dumps(providers_config()))


@pytest.fixture
def server_harness(
    ingest_app: Any,
    database_url: str,
    moto_endpoint: MotoEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[IngestHarness]:
    """The ingest function against a moto *server* behind its fault proxy (not mock_aws: the
    calls go over a real socket, which the proxy can hang)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint.url)
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint.url)
    queue_url = sqs.create_queue(QueueName=f"processing-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    monkeypatch.setenv("PROCESSING_QUEUE_URL", queue_url)
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(providers_config()))
    monkeypatch.delenv("PROVIDERS_CONFIG_FILE", raising=False)
    now = int(time.time())
    monkeypatch.setattr(ingest, "current_time", lambda: float(now))
    # The ingest entry point chooses these call limits at import; another test may have changed
    # them.
    aws.use(aws.INGEST)
    providers.reset_for_tests()
    ingest_app.reset_clients()
    yield IngestHarness(ingest_app, queue_url, sqs, now)
    providers.reset_for_tests()
    ingest_app.reset_clients()
    aws.use(aws.DEFAULT)


def _new_body() -> bytes:
    return json.dumps({"id": f"evt_{uuid.uuid4().hex[:16]}", "type": "invoice.paid"}).encode()


def _deliver(harness: IngestHarness) -> dict[str, Any]:
    body = _new_body()
    headers = providers.sign_delivery(SIGNER["stripe"], body, timestamp=harness.now).headers
    raw: dict[str, Any] = harness.deliver("stripe", body, headers).raw
    return raw


def _bounded(call: Callable[[], dict[str, Any]], limit_s: float) -> tuple[dict[str, Any], float]:
    """Run ``call`` in a thread; fail if it outlives ``limit_s`` (Lambda would have killed it)."""
    result: list[dict[str, Any]] = []
    started = time.monotonic()
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(limit_s)
    elapsed = time.monotonic() - started
    assert not worker.is_alive(), f"still waiting after {limit_s} s: Lambda would have killed it"
    return result[0], elapsed


def counted_metrics(stdout: str) -> dict[str, list[float]]:
    """What CloudWatch counts from ingest's lines: the template's metric filters, run over them."""
    filters = [f for f in metric_filters(deployed_with={}) if f.log_group == "IngestLogGroup"]
    counted: dict[str, list[float]] = {}
    for text in stdout.splitlines():
        if text.startswith("{"):
            line = json.loads(text)
            for matched in (f for f in filters if f.matches(line)):
                counted.setdefault(matched.metric, []).append(1.0)
    return counted


@pytest.fixture
def ingest_lines(server_harness: IngestHarness) -> Iterator[io.StringIO]:
    """The ingest function's own log lines, formatted as Lambda receives them."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(server_harness.app.logger.registered_formatter)
    service_logger = server_harness.app.logger._logger
    service_logger.addHandler(handler)
    try:
        yield sink
    finally:
        service_logger.removeHandler(handler)


def _unavailable_and_counted(reply: dict[str, Any], stdout: str) -> None:
    assert reply["statusCode"] == 503
    assert reply["headers"]["Retry-After"] == "5"
    assert json.loads(reply["body"]) == {"error": "temporarily unavailable, retry later"}
    assert counted_metrics(stdout).get("SecretUnavailable") == [1.0]


# --- SQS that accepts the connection and never answers (defect 3) ---------------------------


def test_an_sqs_endpoint_that_never_answers_still_gets_a_prompt_202(
    server_harness: IngestHarness, moto_endpoint: MotoEndpoint, conn: psycopg.Connection[Any]
) -> None:
    assert _deliver(server_harness)["statusCode"] == 202  # the client exists and is warm
    moto_endpoint.proxy.set_blackhole(True)
    try:
        reply, elapsed = _bounded(lambda: _deliver(server_harness), INGEST_TIMEOUT_S)
    finally:
        moto_endpoint.proxy.set_blackhole(False)

    assert reply["statusCode"] == 202
    assert elapsed <= aws.INGEST.worst_case_s + 1.0
    # The wake-up was not sent: the stamp is cleared, so the next sweep sends the row.
    stamps = conn.execute("SELECT enqueued_at IS NULL FROM webhook_events ORDER BY id").fetchall()
    assert stamps == [(False,), (True,)]


# --- Secrets Manager faults -----------------------------------------------------------------


@dataclass
class _Raw:
    """The body botocore reads from an HTTP response (AWSResponse.raw)."""

    body: bytes

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


class SecretsManagerFaults:
    """Answers GetSecretValue with an AWS error at the HTTP boundary (botocore parses it and
    applies its retry rules, as for a real one) and counts the calls that reached moto.

    Registered on boto3's default session, whose handlers every client built afterwards copies:
    the process's clients are rebuilt whenever a test resets them.
    """

    _HOOKS = (
        ("before-send.secrets-manager.GetSecretValue", "_answer"),
        ("after-call.secrets-manager.GetSecretValue", "_count"),
    )

    def __init__(self) -> None:
        self.error_code: str | None = None
        self.answered_by_moto = 0
        self._events = boto3._get_default_session().events
        for event, method in self._HOOKS:
            self._events.register(event, getattr(self, method), unique_id=f"{event}-{id(self)}")
        aws.reset()  # the next client carries the hooks

    def remove(self) -> None:
        for event, _ in self._HOOKS:
            self._events.unregister(event, unique_id=f"{event}-{id(self)}")
        aws.reset()

    def _answer(self, request: Any, **_: Any) -> AWSResponse | None:
        if self.error_code is None:
            return None
        body = json.dumps({"__type": self.error_code, "message": "injected by the test"})
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": "test"}
        return AWSResponse(request.url, 400, headers, _Raw(body.encode()))

    def _count(self, http_response: Any, **_: Any) -> None:
        if http_response.status_code == 200:
            self.answered_by_moto += 1


@pytest.fixture
def secret_faults(server_harness: IngestHarness) -> Iterator[SecretsManagerFaults]:
    faults = SecretsManagerFaults()
    yield faults
    faults.remove()


@pytest.fixture
def managed_provider_secret(
    server_harness: IngestHarness, moto_endpoint: MotoEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stripe provider's secret lives in Secrets Manager."""
    client = boto3.client("secretsmanager", endpoint_url=moto_endpoint.url)
    arn = client.create_secret(
        Name=f"stripe-{uuid.uuid4().hex[:8]}", SecretString=secret_of("stripe")
    )["ARN"]
    config = providers_config()
    config["providers"]["stripe"]["secrets"] = [{"secret_arn": arn}]
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    providers.reset_for_tests()


@dataclass
class DatabaseSecret:
    """The database reached with credentials from an RDS-shaped secret, through the pg proxy."""

    arn: str
    client: Any
    roles: list[str]
    location: dict[str, Any]

    def point_at(self, role: str) -> None:
        value = dict(self.location, username=role, password="unused-under-trust")
        self.client.put_secret_value(SecretId=self.arn, SecretString=json.dumps(value))


def _admin(database_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(database_url, autocommit=True)


@pytest.fixture
def database_secret(
    server_harness: IngestHarness,
    database_url: str,
    pg_proxy: FaultProxy,
    moto_endpoint: MotoEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[DatabaseSecret]:
    """Two login roles with the application's privileges, as RDS's alternating-users rotation
    keeps them; the secret names the first. DATABASE_URL is unset: the secret is the only way."""
    suffix = uuid.uuid4().hex[:8]
    roles = [f"wi_rot_{suffix}_a", f"wi_rot_{suffix}_b"]
    with _admin(database_url) as admin:
        for role in roles:
            name = sql.Identifier(role)
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
            admin.execute(sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA public TO {}").format(name))
            admin.execute(sql.SQL("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {}").format(name))
    location = {
        "host": "127.0.0.1",
        "port": pg_proxy.port,
        "dbname": conninfo_to_dict(database_url)["dbname"],
        "sslmode": "disable",
    }
    client = boto3.client("secretsmanager", endpoint_url=moto_endpoint.url)
    arn = client.create_secret(Name=f"db-{suffix}", SecretString="{}")["ARN"]
    secret = DatabaseSecret(arn, client, roles, location)
    secret.point_at(roles[0])
    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.setenv("DATABASE_SECRET_ARN", arn)
    db.reset_for_tests()
    try:
        yield secret
    finally:
        db.reset_for_tests()
        with _admin(database_url) as admin:
            for role in roles:
                name = sql.Identifier(role)
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    (role,),
                )
                admin.execute(sql.SQL("DROP OWNED BY {}").format(name))
                admin.execute(sql.SQL("DROP ROLE {}").format(name))


ERROR_CODES = ["ThrottlingException", "AccessDeniedException", "ResourceNotFoundException"]


SECRET_FIXTURE = {"database": "database_secret", "provider": "managed_provider_secret"}


@pytest.mark.parametrize("code", ERROR_CODES)
@pytest.mark.parametrize("which", sorted(SECRET_FIXTURE))
def test_an_unreadable_secret_is_a_503_with_retry_after_and_a_metric(  # noqa: PLR0917
    request: pytest.FixtureRequest,
    server_harness: IngestHarness,
    secret_faults: SecretsManagerFaults,
    conn: psycopg.Connection[Any],
    ingest_lines: io.StringIO,
    which: str,
    code: str,
) -> None:
    request.getfixturevalue(SECRET_FIXTURE[which])
    secret_faults.error_code = code

    reply, elapsed = _bounded(lambda: _deliver(server_harness), INGEST_TIMEOUT_S)

    _unavailable_and_counted(reply, ingest_lines.getvalue())
    assert elapsed <= aws.INGEST.worst_case_s + 1.0
    assert row_count(conn) == 0
    # Once Secrets Manager answers again, the next delivery goes through.
    secret_faults.error_code = None
    assert _deliver(server_harness)["statusCode"] == 202


def test_a_database_secret_that_does_not_exist_is_a_503(
    server_harness: IngestHarness,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    ingest_lines: io.StringIO,
) -> None:
    # moto's own ResourceNotFoundException, not an injected one.
    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.setenv(
        "DATABASE_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone-AbCdEf"
    )
    db.reset_for_tests()

    _unavailable_and_counted(_deliver(server_harness), ingest_lines.getvalue())


@pytest.mark.parametrize("which", sorted(SECRET_FIXTURE))
def test_a_secrets_manager_that_never_answers_is_a_prompt_503(
    request: pytest.FixtureRequest,
    server_harness: IngestHarness,
    moto_endpoint: MotoEndpoint,
    ingest_lines: io.StringIO,
    which: str,
) -> None:
    request.getfixturevalue(SECRET_FIXTURE[which])
    moto_endpoint.proxy.set_blackhole(True)
    try:
        reply, elapsed = _bounded(lambda: _deliver(server_harness), INGEST_TIMEOUT_S)
    finally:
        moto_endpoint.proxy.set_blackhole(False)

    _unavailable_and_counted(reply, ingest_lines.getvalue())
    assert elapsed <= aws.INGEST.worst_case_s + 1.0


# --- the database secret rotated under a running function -----------------------------------


def _login(database_url: str, role: str, allowed: bool) -> None:
    with _admin(database_url) as admin:
        admin.execute(
            sql.SQL("ALTER ROLE {} " + ("LOGIN" if allowed else "NOLOGIN")).format(
                sql.Identifier(role)
            )
        )


def test_a_rotated_database_secret_is_read_again_when_the_database_refuses_the_cached_one(  # noqa: PLR0917
    server_harness: IngestHarness,
    database_url: str,
    database_secret: DatabaseSecret,
    secret_faults: SecretsManagerFaults,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
) -> None:
    first, second = database_secret.roles
    assert _deliver(server_harness)["statusCode"] == 202
    assert secret_faults.answered_by_moto == 1  # read once, then cached
    # Alternating-users rotation: the secret now names the other user, and the old one can no
    # longer log in. The function's connection is closed meanwhile (idle timeout, failover).
    database_secret.point_at(second)
    _login(database_url, first, allowed=False)
    pg_proxy.close_all()

    assert _deliver(server_harness)["statusCode"] == 202

    assert secret_faults.answered_by_moto == 2  # the refusal forced one re-read
    assert row_count(conn) == 2
    users = conn.execute(
        "SELECT DISTINCT usename FROM pg_stat_activity WHERE application_name = %s",
        ("webhook-inbox-ingest",),
    ).fetchall()
    assert users == [(second,)]


def test_a_refused_database_login_rereads_the_secret_at_most_once_a_minute(  # noqa: PLR0917
    server_harness: IngestHarness,
    database_url: str,
    database_secret: DatabaseSecret,
    secret_faults: SecretsManagerFaults,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
    ingest_lines: io.StringIO,
) -> None:
    first, _ = database_secret.roles
    assert _deliver(server_harness)["statusCode"] == 202
    _login(database_url, first, allowed=False)  # refused, and the secret holds nothing newer
    pg_proxy.close_all()
    replies = [_deliver(server_harness) for _ in range(5)]

    assert [r["statusCode"] for r in replies] == [503] * 5
    assert all(r["headers"]["Retry-After"] == "5" for r in replies)
    assert counted_metrics(ingest_lines.getvalue()).get("StoreUnavailable") == [1.0] * 5
    # One read at the start, one forced by the first refusal; the other four wait their minute.
    assert secret_faults.answered_by_moto == 2
    assert row_count(conn) == 1
