"""The sweeper judges the providers registry once a run, whatever the traffic: the real handler,
moto's Secrets Manager made to fail (throttled, hanging, access denied, deleted) and a real
PostgreSQL. A failure is the ``ProvidersRefreshFailed`` metric (the alarm ingest's failed reads
feed), a provider without a live secret the ``ProvidersWithoutLiveSecret`` gauge; a healthy
registry adds nothing to the run's line or its metrics."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

from tests.cert_authority import SNS_CERT_URL, leaf
from tests.integration.maintenance.conftest import Aws, RecordingEvents
from tests.integration.maintenance.test_handler import (
    _emf_everywhere,
    _emf_metrics,
    _formatted_logs,
)
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import aws, config
from webhook_inbox.ingest import provider_registry
from webhook_inbox.ingest.provider_registry import RegistryDocument
from webhook_inbox.maintenance import registry_check
from webhook_inbox.maintenance.publishers import EventBridgePublisher

OPTIONS = {"signature_header": "X-Acme-Signature"}
LIVE = {
    "scheme": "hmac-sha256",
    "options": OPTIONS,
    "secrets": [{"value": "acme-secret-0123456789"}],
}
EXPIRED = {
    "scheme": "hmac-sha256",
    "options": OPTIONS,
    "secrets": [{"value": "gone-secret-0123456789", "expires_at": "2020-01-01T00:00:00Z"}],
}


def _throttled() -> tuple[AWSResponse, dict[str, Any]]:
    response = AWSResponse("https://secretsmanager", 400, {}, None)
    return response, {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}


def _denied() -> tuple[AWSResponse, dict[str, Any]]:
    response = AWSResponse("https://secretsmanager", 400, {}, None)
    return response, {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}


def _hangs() -> None:
    raise ReadTimeoutError(endpoint_url="https://secretsmanager.us-east-1.amazonaws.com")


class Registry:
    """The registry secret in moto; ``fail`` replaces the sweeper's next reads of it, ``reads``
    counts them. ``write`` moves the sweeper's clock on by the time its kept read lasts, as the
    next run that sees an edit does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        self.now = 1_000.0
        monkeypatch.setattr(registry_check, "clock", lambda: self.now)
        self.client = boto3.client("secretsmanager", region_name="us-east-1")
        self.arn = self.client.create_secret(
            Name=f"ProvidersRegistry-{uuid.uuid4().hex[:8]}",
            SecretString=provider_registry.INITIAL_TEXT,
        )["ARN"]
        self.fail: Callable[[], Any] | None = None
        monkeypatch.setenv("PROVIDERS_REGISTRY_ARN", self.arn)
        monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps({"providers": {"acme": LIVE}}))
        config.reset()
        aws.reset()

    def attach(self) -> None:
        """Watch the client the sweeper uses: loading the function chooses its own call limits
        (``aws.use``), which may build a new client, so this comes after the load."""
        aws.client("secretsmanager").meta.events.register(
            "before-call.secrets-manager.GetSecretValue", self._inject
        )

    def _inject(self, params: Any, **_: Any) -> Any:
        if json.loads(params["body"]).get("SecretId") != self.arn:
            return None
        self.reads += 1
        return self.fail() if self.fail else None

    def write(self, providers: dict[str, Any] | None) -> None:
        text = provider_registry.dump_document(RegistryDocument(providers, []))
        self.client.put_secret_value(SecretId=self.arn, SecretString=text)
        self.now += registry_check.READ_EVERY_S


@pytest.fixture
def registry(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Registry:
    return Registry(monkeypatch)


@pytest.fixture
def sweeper_app(database_url: str, registry: Registry, events: RecordingEvents) -> ModuleType:
    app = load_function("sweeper")
    app.publisher = lambda: EventBridgePublisher(events, event_bus_name="default")
    registry.attach()
    return app


def _sweep(
    app: ModuleType, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[dict[str, Any], dict[str, float]]:
    """One scheduled run: its last line, and the registry's metrics it published."""
    capsys.readouterr()
    caplog.clear()
    app.handler(load_event("schedule"), FakeLambdaContext())
    line = _formatted_logs(app, caplog)[-1]
    emitted = _emf_metrics(_emf_everywhere(capsys.readouterr().out, app, caplog))
    wanted = {"ProvidersRefreshFailed", "ProvidersWithoutLiveSecret"}
    return line, {name: value for name, value, _ in emitted if name in wanted}


def test_a_healthy_registry_adds_nothing_to_the_run(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    for providers in (None, {"acme": LIVE}):  # ProvidersConfig serving, then the registry
        registry.write(providers)
        line, metrics = _sweep(sweeper_app, capsys, caplog)
        assert line["message"] == "sweep finished"
        assert metrics == {}
        assert not {"providers_refresh_failed", "providers_without_live_secret"} & set(line)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        pytest.param(_throttled, "ThrottlingException", id="throttled"),
        pytest.param(_hangs, "ReadTimeoutError", id="timeout"),
        pytest.param(_denied, "AccessDeniedException", id="access-denied"),
    ],
)
def test_an_unreadable_registry_is_reported_every_run_and_the_sweep_still_runs(  # noqa: PLR0917
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    fault: Callable[[], Any],
    reason: str,
) -> None:
    registry.fail = fault
    for _ in range(2):  # no delivery at all: each run reports it on its own
        line, metrics = _sweep(sweeper_app, capsys, caplog)
        assert line["message"] == "sweep finished"
        assert line["providers_refresh_failed"] == reason
        assert metrics == {"ProvidersRefreshFailed": 1.0}


def test_a_good_read_serves_five_minutes_of_runs_and_a_failed_one_is_read_again(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One GetSecretValue per five minutes while the registry reads (8,640 a month, the at-rest
    table's figure), judged every run: a secret that expires between reads is reported by the
    next run. Once a read fails, every run reads and reports, so the alarm sees each minute."""
    registry.write({"acme": LIVE, "soon": {**LIVE, "secrets": [_expiring_at(2_000_000_000)]}})
    for _ in range(5):  # five scheduled runs a minute apart
        _, metrics = _sweep(sweeper_app, capsys, caplog)
        assert metrics == {}
        registry.now += 60
    assert registry.reads == 1
    registry.now += registry_check.READ_EVERY_S - 5 * 60  # the kept read is five minutes old
    _sweep(sweeper_app, capsys, caplog)
    assert registry.reads == 2
    registry.fail = _throttled
    registry.now += registry_check.READ_EVERY_S
    for expected_reads in (3, 4):  # failing: read again each run, reported each run
        _, metrics = _sweep(sweeper_app, capsys, caplog)
        assert metrics == {"ProvidersRefreshFailed": 1.0}
        assert registry.reads == expected_reads
    registry.fail = None
    _, metrics = _sweep(sweeper_app, capsys, caplog)
    assert registry.reads == 5
    assert metrics == {}


def test_a_secret_that_expires_between_reads_is_reported_by_the_next_run(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time as real_time

    expires = int(real_time.time()) + 3_600
    registry.write({"acme": LIVE, "soon": {**LIVE, "secrets": [_expiring_at(expires)]}})
    _, metrics = _sweep(sweeper_app, capsys, caplog)
    assert metrics == {}
    monkeypatch.setattr(sweeper_app.time, "time", lambda: expires + 1)
    registry.now += 60
    line, metrics = _sweep(sweeper_app, capsys, caplog)
    assert registry.reads == 1  # judged again from the kept read
    assert line["providers_without_live_secret"] == ["soon"]
    assert metrics == {"ProvidersWithoutLiveSecret": 1.0}


def _expiring_at(epoch: int) -> dict[str, str]:
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"value": "soon-secret-0123456789", "expires_at": stamp}


def test_an_invalid_document_is_reported_by_its_reason_code_only(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry.client.put_secret_value(
        SecretId=registry.arn,
        SecretString=json.dumps({"format": 1, "providers": {"acme": {}}, "history": []}),
    )
    line, metrics = _sweep(sweeper_app, capsys, caplog)
    assert line["providers_refresh_failed"] == "invalid_document"
    assert metrics == {"ProvidersRefreshFailed": 1.0}
    assert "acme" not in json.dumps(line)  # the reason, never the document


def test_providers_with_no_live_secret_are_named_and_counted(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry.write({"acme": LIVE, "beta": EXPIRED, "gamma": EXPIRED})
    line, metrics = _sweep(sweeper_app, capsys, caplog)
    assert line["providers_without_live_secret"] == ["beta", "gamma"]
    assert metrics == {"ProvidersWithoutLiveSecret": 2.0}
    assert "gone-secret" not in json.dumps(line)


def test_a_certificate_sender_that_downloads_needs_no_secret_to_be_live(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An SNS provider that downloads its certificates has no secret and is served; a pinned-only
    one whose every pin expired refuses everything, and is named."""
    topics = {"topic_arns": ["arn:aws:sns:us-east-1:123456789012:orders"]}
    pinned = {**topics, "certificates": "pinned"}
    pin = {"value": leaf().pin(SNS_CERT_URL), "expires_at": "2020-01-01T00:00:00Z"}
    registry.write(
        {
            "acme": LIVE,
            "fetching": {"scheme": "sns", "options": topics, "secrets": []},
            "unpinned": {"scheme": "sns", "options": pinned, "secrets": [pin]},
        }
    )
    line, metrics = _sweep(sweeper_app, capsys, caplog)
    assert line["providers_without_live_secret"] == ["unpinned"]
    assert metrics == {"ProvidersWithoutLiveSecret": 1.0}


def test_a_registry_in_use_with_no_provider_pages_as_a_provider_refused(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Wiped, or its last provider removed: ingest answers 404 to every delivery. The same
    gauge (and so the same page) as a provider refused, the cause in the line. A registry not
    in use yet (ProvidersConfig serves) is not empty."""
    registry.write({})
    line, metrics = _sweep(sweeper_app, capsys, caplog)
    assert line["providers_registry_empty"] is True
    assert metrics == {"ProvidersWithoutLiveSecret": 1.0}
    registry.write(None)  # not in use: PROVIDERS_CONFIG's acme, live
    line, metrics = _sweep(sweeper_app, capsys, caplog)
    assert "providers_registry_empty" not in line
    assert metrics == {}


def test_the_registry_is_reported_when_the_database_is_down_too(
    sweeper_app: ModuleType,
    registry: Registry,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from webhook_inbox.store import db

    registry.fail = _throttled
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1")
    db.reset_for_tests()
    capsys.readouterr()
    assert sweeper_app.handler(load_event("schedule"), FakeLambdaContext()) == {
        "unavailable": "store"
    }
    line = _formatted_logs(sweeper_app, caplog)[-1]
    assert line["message"] == "sweep not started: database unavailable"
    assert line["reason"] == "store"
    assert line["providers_refresh_failed"] == "ThrottlingException"
    emitted = _emf_metrics(_emf_everywhere(capsys.readouterr().out, sweeper_app, caplog))
    named = [(name, value) for name, value, _ in emitted]
    assert ("ProvidersRefreshFailed", 1.0) in named
    assert ("StoreUnavailable", 1.0) in named
    db.reset_for_tests()
