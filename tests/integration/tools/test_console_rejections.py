"""Where the console's health page counts refused deliveries of a deployed stack: its
CloudWatch metrics (moto), read with the operator's credentials; a refusal of CloudWatch is a
note on the page, never a failed page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from webhook_inbox_tools.console import rejections

REGION = "eu-west-1"


@pytest.fixture
def cloudwatch(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("cloudwatch", region_name=REGION)


def _put(client: object, metric: str, provider: str, stack: str, value: float) -> None:
    client.put_metric_data(  # type: ignore[attr-defined]
        Namespace="WebhookInbox",
        MetricData=[{
            "MetricName": metric, "Value": value, "Unit": "Count",
            "Timestamp": datetime.now(UTC) - timedelta(minutes=10),
            "Dimensions": [{"Name": "provider", "Value": provider},
                           {"Name": "service", "Value": stack}],
        }],
    )  # fmt: skip


def test_a_stacks_refusals_per_provider_come_from_its_metrics(cloudwatch: object) -> None:
    _put(cloudwatch, "RejectedByProvider", "stripe", "prod", 4)
    _put(cloudwatch, "RejectedByProvider", "stripe", "other-stack", 100)  # not this stack's
    _put(cloudwatch, "Accepted", "github", "prod", 2)
    read = rejections.from_stack_metrics("prod", REGION)
    found = read(["stripe", "github"], datetime.now(UTC) - timedelta(hours=1), timedelta(hours=1))
    assert found.counted
    assert found.by_provider == {"stripe": 4, "github": 0}


def test_cloudwatch_refusing_the_call_is_a_note_not_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from botocore.exceptions import ClientError

    class Refusing:
        def get_metric_data(self, **_: object) -> None:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetMetricData")

    monkeypatch.setattr(
        "webhook_inbox_tools.cli.providers.target._client_factory",
        lambda _region: lambda _service: Refusing(),
    )
    found = rejections.from_stack_metrics("prod", REGION)(
        ["stripe"], datetime.now(UTC), timedelta(hours=1)
    )
    assert not found.counted
    assert any("CloudWatch: AccessDenied" in note for note in found.notes)
