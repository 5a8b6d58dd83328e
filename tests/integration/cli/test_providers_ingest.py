"""`webhook-inbox providers` changes what the real ingest handler accepts, within its refresh
interval: add → accepted, rotate with overlap → both secrets, remove → 404. One moto account
holds the stack (its output names the registry), the queue and the registry secret; the
refresh interval is stepped with ingest's clock, never slept."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.ingest_support import signed_event
from tests.support import ROOT, FakeLambdaContext, load_function
from webhook_inbox.ingest import provider_source, providers
from webhook_inbox.ingest.provider_registry import INITIAL_TEXT
from webhook_inbox_tools.cli import main

REGION = "us-east-1"
STACK = "inbox-e2e"
REFRESH_S = 30.0
FIRST = "whsec_first-secret-for-newco-0123456789"
SECOND = "whsec_second-secret-for-newco-9876543210"
THIRD = "whsec_third-secret-for-newco-5555555555"
STACK_TEMPLATE = {
    "Parameters": {"ProvidersConfig": {"Type": "String"}, "RegistryArn": {"Type": "String"}},
    "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
    "Outputs": {"ProvidersRegistryArn": {"Value": {"Ref": "RegistryArn"}}},
}


@dataclass
class Clock:
    """Ingest's refresh clock, moved by the test."""

    now: float

    def __call__(self) -> float:
        return self.now


@dataclass
class Inbox:
    app: Any
    clock: Clock

    def deliver(self, secret: str, event_id: str) -> int:
        """A delivery from newco signed with ``secret``: ingest's HTTP status."""
        config = {"providers": {"newco": {"scheme": "stripe", "secrets": [{"value": secret}]}}}
        sender = providers.parse_config(config)["newco"]
        body = json.dumps({"id": event_id, "type": "customer.created"}).encode()
        reply = self.app.handler(signed_event("v2", sender, body), FakeLambdaContext())
        return int(reply["statusCode"])

    def after_refresh(self) -> None:
        self.clock.now += REFRESH_S


@pytest.fixture
def inbox(database_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[Inbox]:
    monkeypatch.chdir(tmp_path)  # no dev env file here
    monkeypatch.setenv("PROVIDERS_CONFIG_FILE", str(ROOT / "events" / "providers.local.json"))
    monkeypatch.delenv("PROVIDERS_CONFIG", raising=False)
    monkeypatch.setenv("PROVIDERS_REFRESH_S", str(REFRESH_S))
    clock = Clock(time.monotonic())
    monkeypatch.setattr(provider_source, "clock", clock)
    providers.reset_for_tests()
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        monkeypatch.setenv(
            "PROCESSING_QUEUE_URL", sqs.create_queue(QueueName="processing")["QueueUrl"]
        )
        secrets = boto3.client("secretsmanager", region_name=REGION)
        arn = secrets.create_secret(Name="registry", SecretString=INITIAL_TEXT)["ARN"]
        monkeypatch.setenv("PROVIDERS_REGISTRY_ARN", arn)
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName=STACK,
            TemplateBody=json.dumps(STACK_TEMPLATE),
            Parameters=[
                {"ParameterKey": "ProvidersConfig", "ParameterValue": '{"providers": {}}'},
                {"ParameterKey": "RegistryArn", "ParameterValue": arn},
            ],
        )
        app = load_function("ingest")
        app.reset_clients()
        yield Inbox(app, clock)
        app.reset_clients()
    providers.reset_for_tests()


def providers_command(*argv: str, stdin: str = "") -> int:
    sys.stdin = io.StringIO(stdin)
    try:
        return main(["providers", *argv, "--stack", STACK, "--region", REGION])
    finally:
        sys.stdin = sys.__stdin__


def test_add_rotate_remove_reach_a_warm_ingest_within_its_refresh(
    inbox: Inbox, conn: psycopg.Connection[Any]
) -> None:
    assert inbox.deliver(FIRST, "evt_before") == 404  # unknown: ingest has cached the registry
    assert (
        providers_command("add", "newco", "--scheme", "stripe", "--secret-stdin", stdin=FIRST) == 0
    )
    assert inbox.deliver(FIRST, "evt_cached") == 404  # the cached copy is not due yet
    inbox.after_refresh()
    assert inbox.deliver(FIRST, "evt_added") == 202

    assert providers_command("rotate", "newco", "--secret-stdin", stdin=SECOND) == 0
    inbox.after_refresh()
    assert inbox.deliver(SECOND, "evt_new_secret") == 202
    assert inbox.deliver(FIRST, "evt_old_secret_in_overlap") == 202

    # No overlap: the older secrets stop verifying as soon as ingest has the change.
    rotated = providers_command(
        "rotate", "newco", "--secret-stdin", "--keep-old-for", "0", stdin=THIRD
    )
    assert rotated == 0
    inbox.after_refresh()
    assert inbox.deliver(SECOND, "evt_dropped_secret") == 401
    assert inbox.deliver(THIRD, "evt_third") == 202

    assert providers_command("remove", "newco", "--yes") == 0
    inbox.after_refresh()
    assert inbox.deliver(THIRD, "evt_removed") == 404
    stored = conn.execute("SELECT event_id FROM webhook_events ORDER BY id").fetchall()
    assert [r[0] for r in stored] == [
        "evt_added",
        "evt_new_secret",
        "evt_old_secret_in_overlap",
        "evt_third",
    ]


def test_a_cold_ingest_accepts_at_once_after_add(inbox: Inbox) -> None:
    assert (
        providers_command("add", "newco", "--scheme", "stripe", "--secret-stdin", stdin=FIRST) == 0
    )
    returned = time.monotonic()
    assert inbox.deliver(FIRST, "evt_first") == 202
    assert time.monotonic() - returned < 5
