"""Every events/*.json fixture through its function, in-process, as `sam local invoke -e` would.

The function's environment is the template's (Globals + its own Variables, resolved for an
existing-database deployment), with the resources it names stood in by moto and the database
by this test's PostgreSQL (DATABASE_URL wins over DATABASE_SECRET_ARN in webhook_inbox.store.db).
An ``events/env.json`` in SAM's ``--env-vars`` format is applied on top, as SAM applies it, and
the sample ``events/providers.local.json`` stands in for the ProvidersConfig parameter.
Fixtures are matched to functions by file name; a fixture that matches none fails the test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.infra_support import Resolver, load_template, parameter_defaults, serverless_functions
from tests.integration.infra.conftest import ResponseRecorder
from tests.support import EVENTS_DIR, FakeLambdaContext, load_function
from webhook_inbox.ingest import provider_registry
from webhook_inbox.store import inbox

SAM_ENV_FILE = "env.json"
SAMPLE_PROVIDERS = "providers.local.json"  # a PROVIDERS_CONFIG document, not an event
FIXTURE_OWNERS = [
    (re.compile(r"^(migrations|cloudformation)"), "MigrationsFunction"),
    (re.compile(r"^(apigw|api-|http|ingest|function-url|webhook)"), "IngestFunction"),
    (re.compile(r"^(sqs|processor)"), "ProcessorFunction"),
    (re.compile(r"^(schedule|sweeper|eventbridge)"), "SweeperFunction"),
    (re.compile(r"^operator"), "OperatorReadFunction"),
]
FIXTURES = sorted(
    p.name for p in EVENTS_DIR.glob("*.json") if p.name not in {SAM_ENV_FILE, SAMPLE_PROVIDERS}
)


def owner_of(fixture: str) -> str:
    for pattern, function in FIXTURE_OWNERS:
        if pattern.match(fixture):
            return function
    raise AssertionError(f"events/{fixture} matches no function; name it after its source")


def function_module_name(function: str) -> str:
    code_uri = serverless_functions()[function]["CodeUri"]
    return Path(str(code_uri)).name


@pytest.fixture
def aws() -> Iterator[dict[str, str]]:
    """The resources the template's environment names, created in moto."""
    with mock_aws():
        queue_url = boto3.client("sqs").create_queue(QueueName="webhook-inbox-processing")[
            "QueueUrl"
        ]
        bus = boto3.client("events").create_event_bus(Name="webhook-inbox-outbox")["EventBusArn"]
        topic = boto3.client("sns").create_topic(Name="webhook-inbox-outbox")["TopicArn"]
        # As the template creates it: not in use yet, so ProvidersConfig serves.
        registry = boto3.client("secretsmanager").create_secret(
            Name="ProvidersRegistry-AbCdEf", SecretString=provider_registry.INITIAL_TEXT
        )["ARN"]
        yield {
            "ProcessingQueue": queue_url,
            "OutboxEventBus": bus.rsplit("/", 1)[-1],
            "OutboxTopic": topic,
            "ProvidersRegistry": registry,
        }


def template_environment(function: str, refs: dict[str, str]) -> dict[str, str]:
    params = parameter_defaults()
    params["DatabaseSecretArn"] = "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbCdEf"
    # An existing VPC's environment: moto's in-process mock answers the services' usual names,
    # not the own network's dual-stack ones (tests/unit/infra/test_own_network.py checks those).
    params["VpcId"] = "vpc-0abc"
    if (EVENTS_DIR / SAMPLE_PROVIDERS).is_file():
        params["ProvidersConfig"] = (EVENTS_DIR / SAMPLE_PROVIDERS).read_text()
    everything = {name: f"<{name}>" for name in load_template()["Resources"]}
    resolver = Resolver(params, {**everything, **refs})
    variables = serverless_functions()[function]["Environment"]["Variables"]
    resolved = {name: resolver.resolve(value) for name, value in variables.items()}
    env = {name: str(value) for name, value in resolved.items() if value is not None}
    sam_env = EVENTS_DIR / SAM_ENV_FILE
    if sam_env.is_file():
        overrides = json.loads(sam_env.read_text())
        env.update({k: str(v) for k, v in overrides.get("Parameters", {}).items()})
        env.update({k: str(v) for k, v in overrides.get(function, {}).items()})
    return env


def test_every_fixture_belongs_to_a_function() -> None:
    assert FIXTURES, "events/ holds no fixtures"
    owners = {owner_of(f) for f in FIXTURES}
    assert owners <= set(serverless_functions())


@pytest.mark.parametrize("fixture", FIXTURES)
def test_fixture_runs_through_its_handler_with_the_templates_environment(
    fixture: str,
    database_url: str,
    aws: dict[str, str],
    response_url: ResponseRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    function = owner_of(fixture)
    for name, value in template_environment(function, aws).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATABASE_URL", database_url)
    event: dict[str, Any] = json.loads((EVENTS_DIR / fixture).read_text())
    if function == "MigrationsFunction":
        event["ResponseURL"] = response_url.url  # the pre-signed S3 URL, on loopback
    app = load_function(function_module_name(function))

    result = app.handler(event, FakeLambdaContext())

    assert_expected_result(
        function,
        result,
        database_url=database_url,
        sqs=boto3.client("sqs"),
        queue_url=aws["ProcessingQueue"],
        response_url=response_url,
    )


SWEEPER_STEPS = [
    "partitions_ahead",
    "expire_leases",
    "paused_events",
    "reenqueue",
    "outbox",
    "purge_payloads",
    "drop_partitions",
    "delete_expired",
    "partition_switch",
]


def assert_expected_answer(function: str, result: Any) -> None:
    """What each function answers its fixture with, on a freshly migrated database.

    Exact, so that an answer that merely has the right shape (a 401 from a provider that did not
    load, a sweep that stopped at its first error) fails. Checked in-process here, and through
    ``webhook-inbox invoke`` against the suite's services and against a running dev stack.
    """
    # Lambda serialises whatever a handler returns: it must be JSON.
    json.dumps(result)
    if function == "IngestFunction":
        # Each ingest fixture is a delivery the sample providers sign, seen for the first time.
        assert result["statusCode"] == 202, result
        assert json.loads(result["body"]) == {"status": "accepted"}, result
    elif function == "ProcessorFunction":
        # The fixture's ids name no row yet, or a row already finished: nothing to redeliver.
        assert result == {"batchItemFailures": []}, result
    elif function == "MigrationsFunction":
        assert result is None, result  # it answers CloudFormation through the ResponseURL
    elif function == "OperatorReadFunction":
        # `status` (of an inbox the other fixtures may have written to), answered as the caller
        # the URL's IAM context names.
        assert result["statusCode"] == 200, result
        answer = json.loads(result["body"])
        assert answer["operator"] == "arn:aws:iam::123456789012:user/ops", answer
        assert list(answer["result"]["events"]) == list(inbox.STATUSES), answer
        assert all(s["count"] >= 0 for s in answer["result"]["events"].values()), answer
        assert set(answer["result"]["outbox"]) == {"pending", "dead", "oldest_pending_created_at"}
    else:
        assert result["completed_steps"] == SWEEPER_STEPS, result
        assert (result["stopped_early_at"], result["errors"]) == (None, []), result
        assert result["backlog"] is not None, result


def assert_expected_result(
    function: str,
    result: Any,
    *,
    database_url: str,
    sqs: Any,
    queue_url: str,
    response_url: ResponseRecorder,
) -> None:
    """The answer, and what it leaves behind on a database and queue no one else reads."""
    assert_expected_answer(function, result)
    if function == "IngestFunction":
        # Accepted: stored, and announced on the queue the template's environment names.
        with psycopg.connect(database_url) as conn:
            (row_id,) = conn.execute("SELECT id FROM webhook_events").fetchone() or (None,)
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
        assert [json.loads(m["Body"]) for m in messages] == [{"id": row_id}]
    elif function == "MigrationsFunction":
        assert [a["Status"] for a in response_url.bodies()] == ["SUCCESS"]
