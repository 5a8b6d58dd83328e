"""The DatabaseProtection custom resource (issue 26): protection on once the stack is whole, off
again only while a failed first create rolls back.

moto's RDS keeps an instance's DeletionProtection, which shows Create's effect and what a delete
then meets; the stack's status during a rollback (which moto's CloudFormation never reaches on its
own) and RDS's "instance busy" answer come from botocore Stubbers on the function's real clients,
which still check every request against the service's model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws

from tests.integration.infra.conftest import ResponseRecorder
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import aws
from webhook_inbox.deploy import database_protection

REGION = "us-east-1"
INSTANCE = "webhook-inbox-database-abc"
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/webhook-inbox/5f3a2c40-3d1e-11f0"


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        aws.reset()
        boto3.client("rds", region_name=REGION).create_db_instance(
            DBInstanceIdentifier=INSTANCE,
            DBInstanceClass="db.t4g.micro",
            Engine="postgres",
            AllocatedStorage=20,
            MasterUsername="webhook_inbox",
            MasterUserPassword="offline-password",
            DeletionProtection=False,
        )
        yield load_function("database_protection")
    aws.reset()


def request(kind: str, url: str) -> dict[str, Any]:
    event = load_event("migrations-create")  # the same envelope; this resource's properties
    event.update(
        RequestType=kind,
        ResponseURL=url,
        StackId=STACK_ID,
        LogicalResourceId="DatabaseProtection",
        ResourceType="Custom::DatabaseProtection",
        ResourceProperties={
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:protector",
            "DBInstanceIdentifier": INSTANCE,
            "StackId": STACK_ID,
            "DatabaseSettings": "db.t4g.micro|20|false|17",
        },
    )
    if kind != "Create":
        event["PhysicalResourceId"] = "webhook-inbox-database-protection"
    return event


def protected() -> bool:
    (instance,) = boto3.client("rds", region_name=REGION).describe_db_instances(
        DBInstanceIdentifier=INSTANCE
    )["DBInstances"]
    return bool(instance["DeletionProtection"])


def stack_in(status: str) -> Stubber:
    stub = Stubber(aws.client("cloudformation"))
    stub.add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": "webhook-inbox",
                    "StackId": STACK_ID,
                    "CreationTime": "2026-12-02T08:00:00Z",
                    "StackStatus": status,
                }
            ]
        },
        {"StackName": STACK_ID},
    )
    return stub


def answer(recorder: ResponseRecorder) -> dict[str, Any]:
    (body,) = recorder.bodies()
    return body


@pytest.mark.parametrize("kind", ["Create", "Update"])
def test_create_and_update_switch_protection_on(
    app: Any, kind: str, response_url: ResponseRecorder
) -> None:
    app.handler(request(kind, response_url.url), FakeLambdaContext())
    body = answer(response_url)
    assert body["Status"] == "SUCCESS", body["Reason"]
    assert body["PhysicalResourceId"] == "webhook-inbox-database-protection"
    assert protected()
    with pytest.raises(ClientError, match="protection"):
        boto3.client("rds", region_name=REGION).delete_db_instance(
            DBInstanceIdentifier=INSTANCE, SkipFinalSnapshot=True
        )


def test_a_failed_create_rolling_back_releases_the_database(
    app: Any, response_url: ResponseRecorder
) -> None:
    app.handler(request("Create", response_url.url), FakeLambdaContext())
    response_url.requests.clear()
    with stack_in("ROLLBACK_IN_PROGRESS") as stub:
        app.handler(request("Delete", response_url.url), FakeLambdaContext())
        stub.assert_no_pending_responses()
    body = answer(response_url)
    assert body["Status"] == "SUCCESS", body["Reason"]
    assert body["Data"] == {"Released": "true"}
    assert not protected()


@pytest.mark.parametrize(
    "status",
    [
        "DELETE_IN_PROGRESS",  # sam delete of a healthy stack
        "UPDATE_IN_PROGRESS",  # an update that removes the database (or replaces it)
        "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
        "UPDATE_ROLLBACK_IN_PROGRESS",  # an update of a healthy stack rolling back
    ],
)
def test_any_other_delete_leaves_the_database_protected(
    app: Any, status: str, response_url: ResponseRecorder
) -> None:
    app.handler(request("Create", response_url.url), FakeLambdaContext())
    response_url.requests.clear()
    with stack_in(status):
        app.handler(request("Delete", response_url.url), FakeLambdaContext())
    body = answer(response_url)
    assert body["Status"] == "SUCCESS", body["Reason"]
    assert body["Data"] == {"Released": "false"}
    assert protected()


def test_a_rollback_after_the_instance_is_gone_answers_success(
    app: Any, response_url: ResponseRecorder
) -> None:
    boto3.client("rds", region_name=REGION).delete_db_instance(
        DBInstanceIdentifier=INSTANCE, SkipFinalSnapshot=True
    )
    with stack_in("ROLLBACK_IN_PROGRESS"):
        app.handler(request("Delete", response_url.url), FakeLambdaContext())
    body = answer(response_url)
    assert body["Status"] == "SUCCESS", body["Reason"]
    assert body["Data"] == {"Released": "false"}


def test_a_refused_change_fails_the_resource_with_its_reason(
    app: Any, response_url: ResponseRecorder
) -> None:
    stub = Stubber(aws.client("rds"))
    stub.add_client_error("modify_db_instance", service_error_code="AccessDenied")
    with stub:
        app.handler(request("Create", response_url.url), FakeLambdaContext())
    body = answer(response_url)
    assert body["Status"] == "FAILED"
    assert "AccessDenied" in body["Reason"]


def test_a_busy_instance_is_retried_within_the_time_given() -> None:
    rds = boto3.client("rds", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    expected = {
        "DBInstanceIdentifier": INSTANCE,
        "DeletionProtection": True,
        "ApplyImmediately": True,
    }
    stub = Stubber(rds)
    stub.add_client_error("modify_db_instance", "InvalidDBInstanceState", expected_params=expected)
    stub.add_client_error("modify_db_instance", "InvalidDBInstanceState", expected_params=expected)
    stub.add_response("modify_db_instance", {}, expected)
    slept: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    with stub:
        database_protection.set_protection(
            rds, INSTANCE, on=True, wait_s=60, sleep=sleep, clock=lambda: now[0]
        )
        stub.assert_no_pending_responses()
    assert slept == [database_protection.RETRY_EVERY_S] * 2


def test_a_busy_instance_past_the_time_given_fails() -> None:
    rds = boto3.client("rds", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    stub = Stubber(rds)
    for _ in range(3):
        stub.add_client_error("modify_db_instance", "InvalidDBInstanceState")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with stub, pytest.raises(rds.exceptions.InvalidDBInstanceStateFault):
        database_protection.set_protection(
            rds, INSTANCE, on=True, wait_s=25, sleep=sleep, clock=lambda: now[0]
        )


# --- an Aurora cluster (DatabaseEngine aurora-*): the protection is the cluster's -----------

CLUSTER = "webhook-inbox-databasecluster-abc"


@pytest.fixture
def cluster_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        aws.reset()
        boto3.client("rds", region_name=REGION).create_db_cluster(
            DBClusterIdentifier=CLUSTER,
            Engine="aurora-postgresql",
            MasterUsername="webhook_inbox",
            MasterUserPassword="offline-password",
            DeletionProtection=False,
        )
        yield load_function("database_protection")
    aws.reset()


def cluster_request(kind: str, url: str) -> dict[str, Any]:
    event = request(kind, url)
    properties = event["ResourceProperties"]
    del properties["DBInstanceIdentifier"]
    properties["DBClusterIdentifier"] = CLUSTER
    properties["DatabaseSettings"] = "aurora-serverless-v2|db.t4g.small|false|17|0|4|300"
    return event


def cluster_protected() -> bool:
    (cluster,) = boto3.client("rds", region_name=REGION).describe_db_clusters(
        DBClusterIdentifier=CLUSTER
    )["DBClusters"]
    return bool(cluster["DeletionProtection"])


@pytest.mark.parametrize("kind", ["Create", "Update"])
def test_create_and_update_switch_the_clusters_protection_on(
    cluster_app: Any, kind: str, response_url: ResponseRecorder
) -> None:
    cluster_app.handler(cluster_request(kind, response_url.url), FakeLambdaContext())
    body = answer(response_url)
    assert body["Status"] == "SUCCESS", body["Reason"]
    assert body["Data"] == {"Protected": CLUSTER}
    assert cluster_protected()
    with pytest.raises(ClientError, match=r"[Pp]rotection"):
        boto3.client("rds", region_name=REGION).delete_db_cluster(
            DBClusterIdentifier=CLUSTER, SkipFinalSnapshot=True
        )


def test_a_failed_create_rolling_back_releases_the_cluster(
    cluster_app: Any, response_url: ResponseRecorder
) -> None:
    cluster_app.handler(cluster_request("Create", response_url.url), FakeLambdaContext())
    response_url.requests.clear()
    with stack_in("ROLLBACK_IN_PROGRESS"):
        cluster_app.handler(cluster_request("Delete", response_url.url), FakeLambdaContext())
    body = answer(response_url)
    assert body["Data"] == {"Released": "true"}
    assert not cluster_protected()


def test_any_other_delete_leaves_the_cluster_protected(
    cluster_app: Any, response_url: ResponseRecorder
) -> None:
    cluster_app.handler(cluster_request("Create", response_url.url), FakeLambdaContext())
    response_url.requests.clear()
    with stack_in("DELETE_IN_PROGRESS"):
        cluster_app.handler(cluster_request("Delete", response_url.url), FakeLambdaContext())
    assert answer(response_url)["Data"] == {"Released": "false"}
    assert cluster_protected()


def test_a_rollback_after_the_cluster_is_gone_answers_success(
    cluster_app: Any, response_url: ResponseRecorder
) -> None:
    # RDS's answer for a cluster that is gone (moto's modify_db_cluster raises a KeyError).
    rds = Stubber(aws.client("rds"))
    rds.add_client_error("modify_db_cluster", "DBClusterNotFoundFault")
    with stack_in("ROLLBACK_IN_PROGRESS"), rds:
        cluster_app.handler(cluster_request("Delete", response_url.url), FakeLambdaContext())
        rds.assert_no_pending_responses()
    body = answer(response_url)
    assert body["Status"] == "SUCCESS", body["Reason"]
    assert body["Data"] == {"Released": "false"}


def test_a_busy_cluster_is_retried_within_the_time_given() -> None:
    rds = boto3.client("rds", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="y")
    expected = {
        "DBClusterIdentifier": CLUSTER,
        "DeletionProtection": True,
        "ApplyImmediately": True,
    }
    stub = Stubber(rds)
    stub.add_client_error(
        "modify_db_cluster", "InvalidDBClusterStateFault", expected_params=expected
    )
    stub.add_response("modify_db_cluster", {}, expected)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with stub:
        database_protection.set_protection(
            rds, CLUSTER, on=True, wait_s=60, cluster=True, sleep=sleep, clock=lambda: now[0]
        )
        stub.assert_no_pending_responses()
    assert now[0] == database_protection.RETRY_EVERY_S


# --- the schedule: protection switched off by hand comes back on --------------------------------


def scheduled() -> dict[str, Any]:
    """The rule's constant input (template.yaml, ReapplyProtection)."""
    return {"reapply": {"DBInstanceIdentifier": INSTANCE, "StackId": STACK_ID}}


def switch_off_by_hand() -> None:
    boto3.client("rds", region_name=REGION).modify_db_instance(
        DBInstanceIdentifier=INSTANCE, DeletionProtection=False, ApplyImmediately=True
    )


@pytest.mark.parametrize("status", sorted(database_protection.AT_REST))
def test_the_schedule_switches_protection_back_on_while_the_stack_is_at_rest(
    app: Any, status: str, response_url: ResponseRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    app.handler(request("Create", response_url.url), FakeLambdaContext())
    switch_off_by_hand()
    with stack_in(status) as stub:
        answer = app.handler(scheduled(), FakeLambdaContext())
        stub.assert_no_pending_responses()
    assert answer == {"found": "reapplied"}
    assert protected()
    assert "deletion protection re-applied" in caplog.text
    assert len(response_url.bodies()) == 1  # the Create's: CloudFormation is told nothing


@pytest.mark.parametrize(
    "status",
    [
        "DELETE_IN_PROGRESS",  # sam delete: the rule is removed before the database anyway
        "DELETE_FAILED",  # a deliberate delete's second pass (infra/RUNBOOK.md)
        "UPDATE_IN_PROGRESS",
        "UPDATE_COMPLETE_CLEANUP_IN_PROGRESS",
        "UPDATE_ROLLBACK_IN_PROGRESS",
        "CREATE_IN_PROGRESS",  # the rule exists before DatabaseProtection switched it on
        "ROLLBACK_IN_PROGRESS",
        "UPDATE_ROLLBACK_FAILED",
    ],
)
def test_the_schedule_leaves_the_instance_alone_while_cloudformation_is_at_work(
    app: Any, status: str
) -> None:
    with stack_in(status):
        answer = app.handler(scheduled(), FakeLambdaContext())
    assert answer == {"found": f"not at rest: {status}"}
    assert not protected()


def test_a_protected_instance_costs_one_describe_and_a_gone_one_nothing(
    app: Any, response_url: ResponseRecorder
) -> None:
    app.handler(request("Create", response_url.url), FakeLambdaContext())
    stub = Stubber(aws.client("cloudformation"))  # no call expected: none stubbed
    with stub:
        assert app.handler(scheduled(), FakeLambdaContext()) == {"found": "protected"}
    boto3.client("rds", region_name=REGION).modify_db_instance(
        DBInstanceIdentifier=INSTANCE, DeletionProtection=False, ApplyImmediately=True
    )
    boto3.client("rds", region_name=REGION).delete_db_instance(
        DBInstanceIdentifier=INSTANCE, SkipFinalSnapshot=True
    )
    with stub:
        assert app.handler(scheduled(), FakeLambdaContext()) == {"found": "gone"}


def test_a_busy_instance_fails_the_run_and_the_next_one_tries_again(app: Any) -> None:
    with stack_in("UPDATE_COMPLETE"):
        stub = Stubber(aws.client("rds"))
        stub.add_response(
            "describe_db_instances",
            {"DBInstances": [{"DBInstanceIdentifier": INSTANCE, "DeletionProtection": False}]},
        )
        stub.add_client_error("modify_db_instance", "InvalidDBInstanceState")
        with stub, pytest.raises(ClientError, match="InvalidDBInstanceState"):
            app.handler(scheduled(), FakeLambdaContext())


def test_the_schedule_switches_the_clusters_protection_back_on(cluster_app: Any) -> None:
    """With Aurora the rule names the cluster: its protection, switched off by hand (moto
    creates it off), comes back on while the stack is at rest."""
    target = {"reapply": {"DBClusterIdentifier": CLUSTER, "StackId": STACK_ID}}
    with stack_in("UPDATE_COMPLETE"):
        assert cluster_app.handler(target, FakeLambdaContext()) == {"found": "reapplied"}
    assert cluster_protected()
    assert cluster_app.handler(target, FakeLambdaContext()) == {"found": "protected"}
