"""The DatabaseLogGroups custom resource: RDS's export log groups get the stack's key and retention.

moto's CloudWatch Logs creates groups with a key and sets retention, but does not implement
AssociateKmsKey: the case where RDS created a group first is answered by a botocore Stubber on
a real client, which still checks every request against the service's model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from tests.integration.infra.conftest import ResponseRecorder
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import aws

REGION = "us-east-1"
GROUPS = ["/aws/rds/instance/db-abc/postgresql", "/aws/rds/instance/db-abc/upgrade"]


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        aws.reset()
        yield load_function("database_log_groups")
    aws.reset()


@pytest.fixture
def key_arn(app: Any) -> str:
    return str(boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["Arn"])


def request(kind: str, url: str, key_arn: str, retention: int = 365) -> dict[str, Any]:
    event = load_event("migrations-create")  # the same envelope; this resource's properties
    event.update(
        RequestType=kind,
        ResponseURL=url,
        LogicalResourceId="DatabaseLogGroups",
        ResourceType="Custom::DatabaseLogGroups",
        ResourceProperties={
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:adopter",
            "LogGroupNames": GROUPS,
            "KmsKeyArn": key_arn,
            "RetentionInDays": str(retention),  # CloudFormation sends every property as text
        },
    )
    return event


def groups() -> dict[str, dict[str, Any]]:
    found = boto3.client("logs", region_name=REGION).describe_log_groups()["logGroups"]
    return {g["logGroupName"]: g for g in found}


def test_groups_rds_has_not_created_yet_are_created_with_the_key_and_retention(
    app: Any, key_arn: str, response_url: ResponseRecorder
) -> None:
    app.handler(request("Create", response_url.url, key_arn), FakeLambdaContext())

    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert answer["PhysicalResourceId"] == "webhook-inbox-database-log-groups"
    assert answer["Data"] == {"LogGroups": ",".join(GROUPS)}
    made = groups()
    assert sorted(made) == GROUPS
    for name in GROUPS:
        assert made[name]["kmsKeyId"] == key_arn
        assert made[name]["retentionInDays"] == 365


def test_without_a_stack_key_groups_get_the_retention_and_logs_own_encryption(
    app: Any, response_url: ResponseRecorder
) -> None:
    """EncryptionKey=aws-managed: the property is empty; no key is named or associated."""
    app.handler(request("Create", response_url.url, ""), FakeLambdaContext())

    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    made = groups()
    assert sorted(made) == GROUPS
    for name in GROUPS:
        assert "kmsKeyId" not in made[name]
        assert made[name]["retentionInDays"] == 365


def test_groups_rds_created_first_are_associated_with_the_key(
    app: Any, key_arn: str, response_url: ResponseRecorder
) -> None:
    """The usual case: RDS creates each group as soon as the instance starts exporting."""
    logs = aws.client("logs")  # the client the function will use (built once per process)
    stub = Stubber(logs)
    for name in GROUPS:
        stub.add_client_error(
            "create_log_group",
            service_error_code="ResourceAlreadyExistsException",
            expected_params={"logGroupName": name, "kmsKeyId": key_arn},
        )
        stub.add_response("associate_kms_key", {}, {"logGroupName": name, "kmsKeyId": key_arn})
        stub.add_response("put_retention_policy", {}, {"logGroupName": name, "retentionInDays": 90})
    with stub:
        app.handler(request("Update", response_url.url, key_arn, 90), FakeLambdaContext())
        stub.assert_no_pending_responses()
    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS", answer["Reason"]


def test_a_refused_call_fails_the_resource_with_its_reason(
    app: Any, key_arn: str, response_url: ResponseRecorder
) -> None:
    stub = Stubber(aws.client("logs"))
    stub.add_response("create_log_group", {})
    stub.add_client_error("put_retention_policy", service_error_code="AccessDeniedException")
    with stub:
        app.handler(request("Create", response_url.url, key_arn), FakeLambdaContext())
    (answer,) = response_url.bodies()
    assert answer["Status"] == "FAILED"
    assert "AccessDeniedException" in answer["Reason"]


def test_delete_leaves_the_groups_and_calls_nothing(
    app: Any, key_arn: str, response_url: ResponseRecorder
) -> None:
    stub = Stubber(aws.client("logs"))  # no responses queued: any call would fail the test
    with stub:
        event = request("Delete", response_url.url, key_arn)
        event["PhysicalResourceId"] = "webhook-inbox-database-log-groups"
        app.handler(event, FakeLambdaContext())
    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS"
