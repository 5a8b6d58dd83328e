"""Every AWS client is built in one place, with timeouts and retries that fit its function.

botocore's defaults (60 s connect, 60 s read, retries) outlast an 8 s ingest: issue 14's defect 3
was the ingest and processor SQS clients and both Secrets Manager readers built with them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra_support import PACKAGE_DIR, ROOT, serverless_functions
from webhook_inbox import aws

FUNCTIONS = serverless_functions()
# The call limits each entry point chooses (checked below against its app.py).
LIMITS_OF = {
    "IngestFunction": "INGEST",
    "ProcessorFunction": "PROCESSOR",
    "SweeperFunction": "SWEEPER",
    "MigrationsFunction": "MIGRATIONS",
    "DatabaseLogGroupsFunction": "LOG_GROUPS",
    "IdleLedgerCleanupFunction": "LEDGER_CLEANUP",
    "OperatorReadFunction": "OPERATOR",
    "OperatorActFunction": "OPERATOR",
}


def _runtime_sources() -> Iterator[Path]:
    yield from sorted(PACKAGE_DIR.rglob("*.py"))
    yield from sorted((ROOT / "functions").rglob("app.py"))


def _builds_a_client(node: ast.AST) -> bool:
    """``boto3.client(…)``, ``boto3.resource(…)`` or ``boto3.Session(…)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "boto3"
        and node.func.attr in {"client", "resource", "Session"}
    )


def test_no_runtime_module_but_aws_builds_a_boto3_client() -> None:
    builders = [
        str(path.relative_to(ROOT))
        for path in _runtime_sources()
        if any(map(_builds_a_client, ast.walk(ast.parse(path.read_text()))))
    ]
    assert builders == ["layers/shared/webhook_inbox/aws.py"]


@pytest.mark.parametrize("name", sorted(LIMITS_OF))
def test_each_function_chooses_call_limits_that_fit_its_timeout(name: str) -> None:
    app = ROOT / str(FUNCTIONS[name]["CodeUri"]) / "app.py"
    assert f"aws.use(aws.{LIMITS_OF[name]})" in app.read_text()
    limits = getattr(aws, LIMITS_OF[name])
    # Half the function's time at most: two calls on one request (a secret, then the
    # wake-up) must still leave the function time to answer.
    assert limits.worst_case_s <= float(FUNCTIONS[name]["Timeout"]) / 2


def test_ingest_calls_fail_within_seconds() -> None:
    assert aws.INGEST.worst_case_s <= 4.0


@pytest.mark.parametrize("limits_name", [*sorted(set(LIMITS_OF.values())), "DEFAULT"])
@pytest.mark.parametrize("service", ["sqs", "secretsmanager", "rds", "events", "sns"])
def test_every_client_carries_its_call_limits(limits_name: str, service: str) -> None:
    limits = getattr(aws, limits_name)
    aws.use(limits)
    try:
        client = aws.client(service, region_name="us-east-1")
        config = client.meta.config
        assert config.connect_timeout == limits.connect_timeout_s
        assert config.read_timeout == limits.read_timeout_s
        assert config.retries["total_max_attempts"] == limits.max_attempts  # first included
        assert config.retries["mode"] == "standard"
        assert aws.client(service, region_name="us-east-1") is client  # built once
    finally:
        aws.use(aws.DEFAULT)
        aws.reset()


def test_the_activity_mark_gives_up_sooner_than_any_ingest_call() -> None:
    """One quick attempt before a writer's first database call: a failed mark is retried by the
    next invocation, and must not cost ingest the time it needs to answer."""
    assert aws.ACTIVITY_MARK.max_attempts == 1
    assert aws.ACTIVITY_MARK.worst_case_s <= aws.INGEST.worst_case_s / 2


def test_the_providers_registry_read_gives_up_sooner_than_any_ingest_call() -> None:
    """One attempt: a failed refresh keeps the last good providers, so retrying in the
    delivery's time buys nothing (docs/design.md, "Providers without a redeploy")."""
    assert aws.REGISTRY_REFRESH.max_attempts == 1
    assert aws.REGISTRY_REFRESH.worst_case_s <= aws.INGEST.worst_case_s / 2
    aws.use(aws.INGEST)
    try:
        client = aws.client("secretsmanager", region_name="us-east-1", limits=aws.REGISTRY_REFRESH)
        assert client.meta.config.retries["total_max_attempts"] == 1
        assert client.meta.config.read_timeout == aws.REGISTRY_REFRESH.read_timeout_s
        # The process's own client for the same service keeps the process's limits.
        default = aws.client("secretsmanager", region_name="us-east-1")
        assert default is not client
        assert default.meta.config.retries["total_max_attempts"] == aws.INGEST.max_attempts
    finally:
        aws.use(aws.DEFAULT)
        aws.reset()
