"""The sweeper checks the providers' own Secrets Manager secrets at any traffic: the real
handler, moto's Secrets Manager (a secret deleted, access denied, no answer) and a real
PostgreSQL. A provider with a live secret that cannot be read is named in the run's line with
the AWS error code and counted as ``SecretUnavailable`` (what ingest's 503s for it count: one
page, secret-unavailable); each secret is read at most once per five minutes, and a run with
the verdict kept reports it again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

from tests.integration.maintenance.conftest import Aws, RecordingEvents
from tests.integration.maintenance.test_handler import (
    _emf_everywhere,
    _emf_metrics,
    _formatted_logs,
)
from tests.integration.maintenance.test_registry_check import OPTIONS, Registry
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import aws
from webhook_inbox.maintenance import secret_check
from webhook_inbox.maintenance.publishers import EventBridgePublisher


@pytest.fixture
def registry(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Registry:
    return Registry(monkeypatch)


@pytest.fixture
def sweeper_app(database_url: str, registry: Registry, events: RecordingEvents) -> ModuleType:
    app = load_function("sweeper")
    app.publisher = lambda: EventBridgePublisher(events, event_bus_name="default")
    return app


class Reads:
    """Every GetSecretValue the sweeper makes, by SecretId; ``fail`` answers for some."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.fail: dict[str, Any] = {}

    def __call__(self, params: Any, **_: Any) -> Any:
        secret_id = json.loads(params["body"]).get("SecretId")
        self.ids.append(secret_id)
        fault = self.fail.get(secret_id)
        return fault() if fault else None


@pytest.fixture
def reads(sweeper_app: ModuleType) -> Reads:
    found = Reads()
    aws.client("secretsmanager").meta.events.register(
        "before-call.secrets-manager.GetSecretValue", found
    )
    return found


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(secret_check, "clock", lambda: now[0])
    return now


def _secret(registry: Registry, value: str = "acme-secret-0123456789") -> str:
    arn: str = registry.client.create_secret(
        Name=f"webhook-inbox/providers/{uuid.uuid4().hex[:8]}", SecretString=value
    )["ARN"]
    return arn


def _provider(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"scheme": "hmac-sha256", "options": OPTIONS, "secrets": list(refs)}


Run = Callable[[], tuple[dict[str, Any], dict[str, float]]]


@pytest.fixture
def sweep(
    sweeper_app: ModuleType, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> Run:
    """One scheduled run: its last line, and the SecretUnavailable it published."""
    return lambda: _sweep(sweeper_app, capsys, caplog)


def _sweep(
    app: ModuleType, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[dict[str, Any], dict[str, float]]:
    capsys.readouterr()
    caplog.clear()
    app.handler(load_event("schedule"), FakeLambdaContext())
    line = _formatted_logs(app, caplog)[-1]
    emitted = _emf_metrics(_emf_everywhere(capsys.readouterr().out, app, caplog))
    return line, {name: value for name, value, _ in emitted if name == "SecretUnavailable"}


def _denied() -> tuple[AWSResponse, dict[str, Any]]:
    response = AWSResponse("https://secretsmanager", 400, {}, None)
    return response, {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}


def _hangs() -> None:
    raise ReadTimeoutError(endpoint_url="https://secretsmanager.us-east-1.amazonaws.com")


def test_readable_secrets_add_nothing_and_are_read_once_per_five_minutes(
    registry: Registry, reads: Reads, clock: list[float], sweep: Run
) -> None:
    arn = _secret(registry)
    registry.write({"acme": _provider({"secret_arn": arn})})
    for _ in range(3):  # three runs a minute apart: one read
        line, metrics = sweep()
        assert line["message"] == "sweep finished"
        assert "provider_secrets_unreadable" not in line
        assert metrics == {}
        clock[0] += 60
    assert reads.ids.count(arn) == 1
    clock[0] += secret_check.CHECK_EVERY_S
    sweep()
    assert reads.ids.count(arn) == 2


def test_a_deleted_secret_pages_every_run_with_one_read_per_five_minutes(
    registry: Registry, reads: Reads, clock: list[float], sweep: Run
) -> None:
    """The provider's only secret, deleted after a rotation put it in (ingest, warm, still
    verifies with its cached value; its next cold start answers 503 to every delivery)."""
    arn = _secret(registry)
    registry.write({"acme": _provider({"secret_arn": arn})})
    registry.client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    for _ in range(3):
        line, metrics = sweep()
        assert line["message"] == "sweep finished"  # the sweep itself runs
        assert line["provider_secrets_unreadable"] == {"acme": "ResourceNotFoundException"}
        assert metrics == {"SecretUnavailable": 1.0}  # every run: two minutes page
        clock[0] += 60
    assert reads.ids.count(arn) == 1
    assert arn not in json.dumps(line)


def test_access_denied_is_named_and_no_answer_stops_the_runs_reads(
    registry: Registry, reads: Reads, clock: list[float], sweep: Run
) -> None:
    denied, hanging, later = _secret(registry), _secret(registry), _secret(registry)
    registry.write(
        {
            "a-denied": _provider({"secret_arn": denied}),
            "b-hanging": _provider({"secret_arn": hanging}),
            "c-later": _provider({"secret_arn": later}),
        }
    )
    reads.fail = {denied: _denied, hanging: _hangs}
    line, metrics = sweep()
    assert line["provider_secrets_unreadable"] == {
        "a-denied": "AccessDeniedException",
        "b-hanging": "ReadTimeoutError",
    }
    assert metrics == {"SecretUnavailable": 2.0}
    assert later not in reads.ids  # Secrets Manager did not answer: the next run reads it
    reads.fail = {}
    clock[0] += 60
    line, _ = sweep()
    assert later in reads.ids
    assert "c-later" not in line["provider_secrets_unreadable"]


def test_expired_secrets_are_not_read_and_a_missing_json_key_is_named_not_counted(
    registry: Registry, reads: Reads, clock: list[float], sweep: Run
) -> None:
    """A value without its json_key is ingest's 500 (ingest-errors pages for it at traffic):
    the line names it, SecretUnavailable does not count it."""
    old = _secret(registry)
    keyed = _secret(registry, json.dumps({"other": "x"}))
    registry.write(
        {
            "acme": _provider(
                {"secret_arn": old, "expires_at": "2020-01-01T00:00:00Z"},
                {"secret_arn": keyed, "json_key": "signing"},
            )
        }
    )
    line, metrics = sweep()
    assert old not in reads.ids
    assert line["provider_secrets_unreadable"] == {"acme": secret_check.NO_JSON_KEY}
    assert metrics == {}


def test_no_read_starts_once_the_run_needs_its_time_for_the_sweep(
    sweeper_app: ModuleType, registry: Registry, reads: Reads
) -> None:
    arn = _secret(registry)
    registry.write({"acme": _provider({"secret_arn": arn})})
    short = FakeLambdaContext(remaining_ms=sweeper_app.PROVIDER_SECRETS_UNTIL_MS)
    sweeper_app.handler(load_event("schedule"), short)
    assert arn not in reads.ids
