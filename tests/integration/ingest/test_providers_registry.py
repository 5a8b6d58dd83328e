"""Providers from the stack's registry secret: the real ingest handler, moto's
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
from webhook_inbox import aws
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import provider_registry, provider_source, providers
from webhook_inbox.ingest.provider_registry import RegistryDocument

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
    # The longest retry delay the jitter allows: 1 s after a first failure, then 2, 4, 8 ...
    monkeypatch.setattr(provider_source, "jitter", lambda: 1.0)
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


def _denied() -> tuple[AWSResponse, dict[str, Any]]:
    response = AWSResponse("https://secretsmanager", 400, {}, None)
    return response, {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}


FAULTS = [
    pytest.param(_throttled, "ThrottlingException", id="throttled"),
    pytest.param(_down, "EndpointConnectionError", id="down"),
    pytest.param(_hangs, "ReadTimeoutError", id="timeout"),
    pytest.param(_denied, "AccessDeniedException", id="access-denied"),
]
MAX_AGE_S = 60.0


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
    filters = [f for f in metric_filters(deployed_with={}) if f.log_group == "IngestLogGroup"]
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


@pytest.mark.parametrize(("fault", "reason"), FAULTS)
def test_a_copy_that_cannot_be_re_read_accepts_what_it_verifies_until_the_max_age(
    registry: Registry, ingest_lines: io.StringIO, fault: Callable[[], Any], reason: str
) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    assert registry.deliver("acme", NEW_SECRET) == 202
    registry.fail = fault
    registry.advance(REFRESH_S)  # a re-read is due, and fails
    assert registry.deliver("acme", NEW_SECRET) == 202
    registry.advance(MAX_AGE_S - REFRESH_S - 0.5)
    assert registry.deliver("acme", NEW_SECRET) == 202  # just under the bound: still accepted
    failures = [f["reason"] for f in _refresh_failures(ingest_lines)]
    assert failures == [reason] * len(failures)
    assert 2 <= len(failures) <= 6  # every failed read counted, retried with a backoff
    assert _counted(ingest_lines)["ProvidersRefreshFailed"] == len(failures)
    registry.advance(0.5)  # the copy is MAX_AGE_S old: it no longer accepts anything
    reply = registry.harness.deliver("acme", *_signed(registry, NEW_SECRET))
    assert (reply.status, reply.raw["headers"]["Retry-After"]) == (503, "5")
    registry.fail = None
    registry.write({})
    registry.advance(REFRESH_S)
    assert registry.deliver("acme", NEW_SECRET) == 404  # recovered: the newest document


@pytest.mark.parametrize(("fault", "reason"), FAULTS)
def test_a_stale_copy_answers_503_for_what_it_would_refuse(
    registry: Registry,
    ingest_lines: io.StringIO,
    conn: psycopg.Connection[Any],
    fault: Callable[[], Any],
    reason: str,
) -> None:
    """A provider added and a secret rotated in after the last good read: a 404 or 401 would
    lose the event (GitHub does not redeliver; Slack and Shopify disable failing endpoints),
    a 503 is retried until the registry can be read again."""
    registry.write({"acme": _acme({"value": OLD_SECRET})})
    assert registry.deliver("acme", OLD_SECRET) == 202
    registry.fail = fault
    registry.write({"acme": _acme({"value": NEW_SECRET}), "beta": _acme({"value": NEW_SECRET})})
    registry.advance(REFRESH_S)
    assert registry.deliver("beta", NEW_SECRET) == 503  # added since: not a 404
    assert registry.deliver("acme", NEW_SECRET) == 503  # rotated in since: not a 401
    assert registry.deliver("acme", OLD_SECRET) == 202  # what the copy verifies is accepted
    assert row_count(conn) == 2
    unavailable = [
        json.loads(t) for t in ingest_lines.getvalue().splitlines() if '"unavailable"' in t
    ]
    assert [u["reason"] for u in unavailable] == ["providers_registry"] * 2
    assert all("cannot be re-read" in u["detail"] for u in unavailable)
    # One cause, one page: the failed reads are counted (providers-refresh-failed), the 503s
    # they cause are not counted again as an unreadable secret.
    counted = _counted(ingest_lines)
    assert "SecretUnavailable" not in counted
    assert counted["ProvidersRefreshFailed"] >= 1
    registry.fail = None
    registry.advance(REFRESH_S)  # the backoff is over: read again, and both are served
    assert registry.deliver("beta", NEW_SECRET) == 202
    assert registry.deliver("acme", NEW_SECRET) == 202


def test_a_fresh_copy_still_refuses_with_4xx(registry: Registry) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    assert registry.deliver("acme", OLD_SECRET) == 401
    assert registry.deliver("nobody", NEW_SECRET) == 404


@pytest.mark.parametrize(("fault", "reason"), FAULTS)
def test_a_revoked_secret_and_a_removed_provider_stop_within_the_max_age(
    registry: Registry, fault: Callable[[], Any], reason: str
) -> None:
    """`rotate --keep-old-for 0` of a leaked secret, and `remove`, while the registry cannot
    be read: neither the leaked secret nor the removed provider verifies past the bound."""
    registry.write({"acme": _acme({"value": OLD_SECRET}), "beta": _acme({"value": OLD_SECRET})})
    assert registry.deliver("acme", OLD_SECRET) == 202
    registry.write({"acme": _acme({"value": NEW_SECRET})})  # revoked, removed
    registry.fail = fault
    statuses = {"acme": [], "beta": []}
    for _ in range(int(2 * MAX_AGE_S)):  # two minutes, a delivery of each a second
        registry.advance(1.0)
        for name, seen in statuses.items():
            seen.append(registry.deliver(name, OLD_SECRET))
    for name, seen in statuses.items():
        accepted = [second for second, status in enumerate(seen, 1) if status == 202]
        assert max(accepted) < MAX_AGE_S, name
        assert set(seen[int(MAX_AGE_S) :]) == {503}, name


@pytest.mark.parametrize(("fault", "reason"), FAULTS)
def test_a_failed_cold_read_is_retried_after_a_short_backoff(
    registry: Registry, fault: Callable[[], Any], reason: str
) -> None:
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    registry.fail = fault
    assert registry.deliver("acme", NEW_SECRET) == 503
    registry.fail = None  # Secrets Manager is back
    registry.advance(0.9)
    assert registry.deliver("acme", NEW_SECRET) == 503  # inside the first backoff: no call
    assert len(registry.calls) == 1
    registry.advance(0.1)  # at most a second after the failure, not a refresh interval
    assert registry.deliver("acme", NEW_SECRET) == 202
    assert len(registry.calls) == 2


def test_the_retries_of_a_failing_registry_are_bounded(registry: Registry) -> None:
    """Reads back off exponentially up to the refresh interval: a registry that stays
    unreadable costs each execution environment a handful of calls, then two a minute."""
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    assert registry.deliver("acme", NEW_SECRET) == 202
    registry.fail = _throttled
    for _ in range(6000):  # ten minutes, ten deliveries a second
        registry.advance(0.1)
        registry.harness.deliver("acme", b"{}", {})
    # 1 good read, then failures at +30 s, +1, +2, +4, +8, +16 s, then one every 30 s.
    assert len(registry.calls) <= 1 + 6 + (600 - 61) // 30 + 1
    assert len(registry.calls) >= 1 + 6 + (600 - 61) // 30 - 1


def _signed(registry: Registry, secret: str) -> tuple[bytes, dict[str, str]]:
    signer = providers.parse_config({"providers": {"acme": _acme({"value": secret})}})["acme"]
    body = json.dumps({"id": f"evt_{uuid.uuid4().hex[:12]}", "type": "t"}).encode()
    return body, dict(providers.sign_delivery(signer, body, timestamp=registry.harness.now).headers)


def test_without_a_last_good_configuration_an_unreadable_registry_is_a_retriable_503(
    registry: Registry, ingest_lines: io.StringIO
) -> None:
    registry.fail = _throttled
    reply = registry.harness.deliver("acme", b"{}", {})
    assert reply.status == 503
    assert reply.raw["headers"]["Retry-After"] == "5"
    assert registry.harness.deliver("acme", b"{}", {}).status == 503  # no second call
    assert len(registry.calls) == 1
    # The failed read is counted (providers-refresh-failed, the cause's one alarm); the 503s
    # carry their own reason and are not counted again as an unreadable secret.
    assert _counted(ingest_lines) == {"ProvidersRefreshFailed": 1}
    parsed = [json.loads(t) for t in ingest_lines.getvalue().splitlines() if t.startswith("{")]
    answered = [line for line in parsed if line["message"] == "unavailable"]
    assert [(line["reason"], line["detail"]) for line in answered] == [
        ("providers_registry", "cannot read the providers registry: ThrottlingException")
    ] * 2
    registry.fail = None
    registry.write({"acme": _acme({"value": NEW_SECRET})})
    registry.advance(REFRESH_S)
    assert registry.deliver("acme", NEW_SECRET) == 202
