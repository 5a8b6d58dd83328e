"""The IdleLedgerCleanup custom resource: on Delete it empties the idle ledger's bucket, so that
CloudFormation can delete the bucket and `sam delete` stays one command (moto S3)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.integration.infra.conftest import ResponseRecorder
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import aws, idle_ledger
from webhook_inbox.deploy import idle_ledger_cleanup

REGION = "us-east-1"
BUCKET = "webhook-inbox-idleledger-1a2b3c4d5e6f"
KEYS = [idle_ledger.ACTIVITY_KEY, idle_ledger.RECORD_KEY]


@pytest.fixture
def app(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        aws.reset()
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        yield load_function("idle_ledger_cleanup")
    aws.reset()


def request(kind: str, url: str, bucket: str = BUCKET) -> dict[str, Any]:
    event = load_event("migrations-create")  # the same envelope; this resource's properties
    event.update(
        RequestType=kind,
        ResponseURL=url,
        LogicalResourceId="IdleLedgerCleanup",
        ResourceType="Custom::IdleLedgerCleanup",
        ResourceProperties={
            "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:cleanup",
            "BucketName": bucket,
            "Keys": KEYS,
        },
    )
    if kind != "Create":
        event["PhysicalResourceId"] = "webhook-inbox-idle-ledger-cleanup"
    return event


def keys_left(bucket: str = BUCKET) -> list[str]:
    listed = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def put(key: str) -> None:
    boto3.client("s3", region_name=REGION).put_object(Bucket=BUCKET, Key=key, Body=b"{}")


def test_delete_empties_the_ledger_even_of_a_write_still_in_flight(
    app: Any, response_url: ResponseRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An invocation of a just-deleted writer ends within its timeout: its last PUT lands
    during the wait and the second pass removes it."""
    for key in KEYS:
        put(key)
    waits: list[float] = []

    def late_writer(seconds: float) -> None:
        waits.append(seconds)
        assert keys_left() == []  # the first pass emptied it
        put(idle_ledger.RECORD_KEY)  # a sweeper run that was still going

    monkeypatch.setattr(idle_ledger_cleanup, "sleep", late_writer)
    app.handler(request("Delete", response_url.url), FakeLambdaContext())

    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert answer["Data"] == {"Deletes": "4"}
    assert waits == [idle_ledger_cleanup.WRITER_GRACE_S]
    assert keys_left() == []
    boto3.client("s3", region_name=REGION).delete_bucket(Bucket=BUCKET)  # what CloudFormation does


def test_a_bucket_already_gone_is_empty(
    app: Any, response_url: ResponseRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idle_ledger_cleanup, "sleep", lambda s: pytest.fail("nothing to wait for"))
    app.handler(request("Delete", response_url.url, bucket="deleted-by-hand"), FakeLambdaContext())
    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert answer["Data"] == {"Deletes": "0"}


def test_an_object_the_stack_never_wrote_is_left_for_the_operator(
    app: Any, response_url: ResponseRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The role may delete only the two keys: a stranger's object stays, and CloudFormation's
    delete of the bucket then names the problem (docs/deploy.md, "Deleting the stack")."""
    monkeypatch.setattr(idle_ledger_cleanup, "sleep", lambda s: None)
    put(idle_ledger.ACTIVITY_KEY)
    put("someone-elses.txt")
    app.handler(request("Delete", response_url.url), FakeLambdaContext())
    assert keys_left() == ["someone-elses.txt"]


@pytest.mark.parametrize("kind", ["Create", "Update"])
def test_create_and_update_touch_nothing(
    app: Any, response_url: ResponseRecorder, kind: str
) -> None:
    put(idle_ledger.ACTIVITY_KEY)
    app.handler(request(kind, response_url.url), FakeLambdaContext())
    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS", answer["Reason"]
    assert answer["PhysicalResourceId"] == "webhook-inbox-idle-ledger-cleanup"
    assert keys_left() == [idle_ledger.ACTIVITY_KEY]
