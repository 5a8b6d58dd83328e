"""Providers from the stack's registry secret (issue 28): the real ingest handler, moto's
Secrets Manager and a real PostgreSQL.

Time is stepped with provider_source's clock (the refresh interval) and ingest's clock (signature
tolerance and secret expiry), never slept. Secrets Manager calls are counted at botocore's
``before-call`` event, which also injects throttling, outages and timeouts for the failure cases.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import psycopg
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

from tests.infra_support import metric_filters
from tests.integration.ingest.conftest import IngestHarness, row_count
from webhook_inbox import aws, ingest, provider_registry, provider_source, providers
from webhook_inbox.provider_registry import RegistryDocument

REFRESH_S = 30.0
ACME_OPTIONS = {"signature_header": "X-Acme-Signature"}
OLD_SECRET = "acme-old-secret-0123456789"
NEW_SECRET = "acme-new-secret-0123456789"
ENTRY = {
    "at": "2026-12-02T15:00:00Z",
    "by": "arn:aws:iam::123456789012:user/ops",
    "action": "add",
    "provider": "acme",
    "change": {"scheme": "hmac-sha256"},
}


def _acme(*secrets: dict[str, Any]) -> dict[str, Any]:
    return {"scheme": "hmac-sha256", "options": ACME_OPTIONS, "secrets": list(secrets)}


def _utc(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Registry:
    """The registry secret in moto, the clock ingest refreshes by, and the GetSecretValue calls
    made for that secret (``fail``: what the next calls raise or return instead)."""

    client: Any
    arn: str
    harness: IngestHarness
    now: list[float]
    calls: list[str] = field(default_factory=list)
    fail: Callable[[], Any] | None = None

    def write(self, registered: dict[str, Any] | None) -> None:
        doc = RegistryDocument(registered, [ENTRY] if registered else [])
        text = provider_registry.INITIAL_TEXT if registered is None else None
        self.write_text(text or provider_registry.dump_document(doc))

    def write_text(self, text: str) -> None:
        self.client.put_secret_value(SecretId=self.arn, SecretString=text)

    def advance(self, seconds: float) -> None:
        self.now[0] += seconds

    def deliver(self, name: str, secret: str, *, at: int | None = None) -> int:
        """A delivery to ``name`` signed with ``secret`` at ``at`` (default: the frozen now)."""
        signer = providers.parse_config({"providers": {name: _acme({"value": secret})}}).providers[
            name
        ]
        body = json.dumps({"id": f"evt_{uuid.uuid4().hex[:12]}", "type": "t"}).encode()
        headers = providers.sign_delivery(signer, body, timestamp=at or self.harness.now).headers
        return self.harness.deliver(name, body, headers).status


def _count_and_inject(registry: Registry) -> Callable[..., Any]:
    def before_call(params: Any, **_: Any) -> Any:
        if json.loads(params["body"]).get("SecretId") != registry.arn:
            return None
        registry.calls.append("GetSecretValue")
        return registry.fail() if registry.fail else None

    return before_call


@pytest.fixture
def registry(harness: IngestHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    client = boto3.client("secretsmanager")
    key = boto3.client("kms").create_key()["KeyMetadata"]["Arn"]
    arn = client.create_secret(
        Name=f"ProvidersRegistry-{uuid.uuid4().hex[:8]}",
        KmsKeyId=key,
        SecretString=provider_registry.INITIAL_TEXT,
    )["ARN"]
    monkeypatch.setenv("PROVIDERS_REGISTRY_ARN", arn)
    monkeypatch.setenv("PROVIDERS_REFRESH_S", str(REFRESH_S))
    now = [1000.0]
    monkeypatch.setattr(provider_source, "clock", lambda: now[0])
    harness.app.reset_clients()
    found = Registry(client, arn, harness, now)
    # The very client the refresh uses (built once per process, with its own call limits).
    reader = aws.client("secretsmanager", limits=aws.REGISTRY_REFRESH)
    reader.meta.events.register(
        "before-call.secrets-manager.GetSecretValue", _count_and_inject(found)
    )
    yield found
    harness.app.reset_clients()


def _throttled() -> tuple[AWSResponse, dict[str, Any]]:
    response = AWSResponse("https://secretsmanager", 400, {}, None)
    return response, {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}


def _down() -> None:
    raise EndpointConnectionError(endpoint_url="https://secretsmanager.us-east-1.amazonaws.com")


def _hangs() -> None:
    raise ReadTimeoutError(endpoint_url="https://secretsmanager.us-east-1.amazonaws.com")


@pytest.fixture
def ingest_lines(harness: IngestHarness) -> Iterator[io.StringIO]:
    """The ingest function's own log lines, formatted as Lambda receives them."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(harness.app.logger.registered_formatter)
    service_logger = harness.app.logger._logger
    service_logger.addHandler(handler)
    try:
        yield sink
    finally:
        service_logger.removeHandler(handler)


def _counted(lines: io.StringIO) -> dict[str, int]:
    """What CloudWatch counts from the lines: the template's metric filters, run over them."""
    filters = [f for f in metric_filters() if f.log_group == "IngestLogGroup"]
    counted: dict[str, int] = {}
    for text in lines.getvalue().splitlines():
        if text.startswith("{"):
            line = json.loads(text)
            for matched in (f for f in filters if f.matches(line)):
                counted[matched.metric] = counted.get(matched.metric, 0) + 1
    return counted


def _refresh_failures(lines: io.StringIO) -> list[dict[str, Any]]:
    parsed = [json.loads(t) for t in lines.getvalue().splitlines() if t.startswith("{")]
    return [line for line in parsed if line["message"] == "providers_refresh_failed"]


# --- compatibility ---------------------------------------------------------------------------


def test_a_registry_not_in_use_serves_providers_config(registry: Registry) -> None:
    harness = registry.harness
    body = b'{"id": "evt_compat", "type": "t"}'
    assert harness.deliver("stripe", body, harness.sign("stripe", body)).status == 202
    assert registry.calls == ["GetSecretValue"]


def test_once_in_use_the_registry_alone_decides(registry: Registry) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    harness = registry.harness
    body = b'{"id": "evt_gone", "type": "t"}'
    # stripe is in PROVIDERS_CONFIG but not in the registry: an unknown provider now.
    assert harness.deliver("stripe", body, harness.sign("stripe", body)).status == 404
    assert registry.deliver("acme", NEW_SECRET) == 202


# --- add, rotate, remove ------------------------------------------------------------------


def test_an_added_provider_is_served_within_one_refresh_interval(
    registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    registry.write({})
    assert registry.deliver("acme", NEW_SECRET) == 404
    registry.write({"acme": _acme({"value": NEW_SECRET, "added_at": "2026-12-02T15:00:00Z"})})
    registry.advance(REFRESH_S - 0.5)
    assert registry.deliver("acme", NEW_SECRET) == 404  # the cached document, no call
    registry.advance(0.5)  # the refresh interval since the last read: the bound
    assert registry.deliver("acme", NEW_SECRET) == 202
    assert row_count(conn) == 1
    assert registry.calls == ["GetSecretValue"] * 2


def test_a_rotation_keeps_both_secrets_until_the_old_one_expires(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = registry.harness.now
    expires = now + 24 * 3600
    registry.write(
        {
            "acme": _acme(
                {"value": NEW_SECRET, "added_at": _utc(now)},
                {"value": OLD_SECRET, "expires_at": _utc(expires)},
            )
        }
    )
    assert registry.deliver("acme", NEW_SECRET) == 202
    assert registry.deliver("acme", OLD_SECRET) == 202
    monkeypatch.setattr(ingest, "current_time", lambda: float(expires - 1))
    assert registry.deliver("acme", OLD_SECRET, at=expires - 1) == 202
    # From expires_at on, without anything rewriting the registry: only the new secret.
    monkeypatch.setattr(ingest, "current_time", lambda: float(expires))
    assert registry.deliver("acme", OLD_SECRET, at=expires) == 401
    assert registry.deliver("acme", NEW_SECRET, at=expires) == 202


def test_a_removed_provider_gets_the_unknown_providers_404(
    registry: Registry, conn: psycopg.Connection[Any]
) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    assert registry.deliver("acme", NEW_SECRET) == 202
    registry.write({})
    registry.advance(REFRESH_S)
    reply = registry.harness.deliver("acme", b"{}", {})
    assert (reply.status, reply.body) == (404, {"error": "unknown provider"})
    assert row_count(conn) == 1  # its events stay in the inbox


# --- negative caching ---------------------------------------------------------------------


def test_a_flood_of_unknown_names_makes_one_call_per_refresh_interval(registry: Registry) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    statuses = set()
    for n in range(1000):
        reply = registry.harness.deliver(f"nobody-{n}", b"{}", {})
        statuses.add(reply.status)
        registry.advance(0.1)  # 1,000 deliveries over 100 s
    assert statuses == {404}
    # Reads at 0, 30, 60 and 90 s: by time, never by request.
    assert len(registry.calls) == 4


# --- failures -----------------------------------------------------------------------------


def test_an_invalid_document_keeps_the_last_good_one_serving_and_is_counted(
    registry: Registry, ingest_lines: io.StringIO
) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    assert registry.deliver("acme", NEW_SECRET) == 202
    registry.write_text(json.dumps({"format": 1, "providers": {"acme": {}}, "history": []}))
    registry.advance(REFRESH_S)
    assert registry.deliver("acme", NEW_SECRET) == 202
    for _ in range(5):  # backs off until the next interval: no call, no line
        assert registry.deliver("acme", NEW_SECRET) == 202
    assert len(registry.calls) == 2
    failures = _refresh_failures(ingest_lines)
    assert [f["reason"] for f in failures] == ["invalid_document"]
    assert "acme" not in json.dumps(failures)  # the reason, never the document
    assert _counted(ingest_lines)["ProvidersRefreshFailed"] == 1


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (_throttled, "ThrottlingException"),
        (_down, "EndpointConnectionError"),
        (_hangs, "ReadTimeoutError"),
    ],
)
def test_secrets_manager_failing_during_a_refresh_keeps_the_last_good_configuration(
    registry: Registry, ingest_lines: io.StringIO, fault: Callable[[], Any], reason: str
) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    assert registry.deliver("acme", NEW_SECRET) == 202
    registry.fail = fault
    for _ in range(3):  # three refresh intervals of failures
        registry.advance(REFRESH_S)
        assert registry.deliver("acme", NEW_SECRET) == 202
        assert registry.deliver("acme", NEW_SECRET) == 202
    assert len(registry.calls) == 4  # one attempt per interval, none per delivery
    assert [f["reason"] for f in _refresh_failures(ingest_lines)] == [reason] * 3
    assert _counted(ingest_lines)["ProvidersRefreshFailed"] == 3
    registry.fail = None
    registry.write({})
    registry.advance(REFRESH_S)
    assert registry.deliver("acme", NEW_SECRET) == 404  # recovered: the newest document


def test_without_a_last_good_configuration_an_unreadable_registry_is_a_retriable_503(
    registry: Registry, ingest_lines: io.StringIO
) -> None:
    registry.fail = _throttled
    reply = registry.harness.deliver("acme", b"{}", {})
    assert reply.status == 503
    assert reply.raw["headers"]["Retry-After"] == "5"
    assert registry.harness.deliver("acme", b"{}", {}).status == 503  # no second call
    assert len(registry.calls) == 1
    # Counted and alarmed as any unreadable secret is (secret-unavailable): with nothing kept
    # serving, there is no refresh failure to report besides the 503s.
    assert _counted(ingest_lines) == {"SecretUnavailable": 2}
    parsed = [json.loads(t) for t in ingest_lines.getvalue().splitlines() if t.startswith("{")]
    assert [line["detail"] for line in parsed] == [
        "cannot read the providers registry: ThrottlingException"
    ] * 2
    registry.fail = None
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    registry.advance(REFRESH_S)
    assert registry.deliver("acme", NEW_SECRET) == 202
