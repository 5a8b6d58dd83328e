"""The idle ledger's bucket in template.yaml: private, encrypted with the stack's key, TLS only,
emptied on delete; and each function's access to it the least its code needs
(docs/design.md, "Idle means idle")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra_support import STACK_KEY_OR_NONE, load_template, serverless_functions
from webhook_inbox import idle_ledger

RESOURCES = load_template()["Resources"]
FUNCTIONS = serverless_functions()
BUCKET_ARN = {"Fn::GetAtt": ["IdleLedger", "Arn"]}
ACTIVITY = {"Fn::Sub": f"${{IdleLedger.Arn}}/{idle_ledger.ACTIVITY_KEY}"}
RECORD = {"Fn::Sub": f"${{IdleLedger.Arn}}/{idle_ledger.RECORD_KEY}"}
# Function -> (action, resource) pairs on the ledger: writers PUT their mark, the sweeper reads
# both objects, may tell a missing one (ListBucket), and PUTs its record.
EXPECTED: dict[str, set[tuple[str, str]]] = {
    "IngestFunction": {("s3:PutObject", "activity")},
    "ProcessorFunction": {("s3:PutObject", "activity")},
    "OperatorActFunction": {("s3:PutObject", "activity")},
    "SweeperFunction": {
        ("s3:GetObject", "activity"),
        ("s3:GetObject", "record"),
        ("s3:ListBucket", "bucket"),
        ("s3:PutObject", "record"),
    },
}
NAMES = {repr(ACTIVITY): "activity", repr(RECORD): "record", repr(BUCKET_ARN): "bucket"}


def _s3_grants(props: dict[str, Any]) -> set[tuple[str, str]]:
    found = set()
    for policy in props.get("Policies", []):
        for statement in policy.get("Statement", []):
            if "Fn::If" in statement:
                continue  # the ledger's statements are unconditional
            actions = statement["Action"]
            for action in [actions] if isinstance(actions, str) else actions:
                if not action.startswith("s3:"):
                    continue
                assert statement["Effect"] == "Allow"
                resources = statement["Resource"]
                for resource in resources if isinstance(resources, list) else [resources]:
                    found.add((action, NAMES.get(repr(resource), repr(resource))))
    return found


def test_the_bucket_is_private_encrypted_with_the_stacks_key_and_owner_enforced() -> None:
    bucket = RESOURCES["IdleLedger"]
    assert bucket["Type"] == "AWS::S3::Bucket"
    assert "Condition" not in bucket  # every deployment has one
    props = bucket["Properties"]
    assert "BucketName" not in props  # CloudFormation names it: two stacks never collide
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms",  # aws/s3 where no key is named
        "KMSMasterKeyID": STACK_KEY_OR_NONE,
    }
    assert rule["BucketKeyEnabled"] is True  # no KMS call per request
    assert "VersioningConfiguration" not in props  # two deletes must empty it


def test_the_bucket_policy_refuses_anything_but_tls() -> None:
    policy = RESOURCES["IdleLedgerPolicy"]["Properties"]
    assert policy["Bucket"] == {"Ref": "IdleLedger"}
    (deny,) = policy["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Principal"] == "*"
    assert deny["Action"] == "s3:*"
    assert deny["Resource"] == [BUCKET_ARN, {"Fn::Sub": "${IdleLedger.Arn}/*"}]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_each_function_gets_the_least_the_ledger_needs(name: str) -> None:
    if name == "IdleLedgerCleanupFunction":
        return  # its own role: the next test
    assert _s3_grants(FUNCTIONS[name]) == EXPECTED.get(name, set())
    variables = FUNCTIONS[name].get("Environment", {}).get("Variables", {})
    if name in EXPECTED:
        assert variables["IDLE_LEDGER_BUCKET"] == {"Ref": "IdleLedger"}
    else:
        assert variables.get("IDLE_LEDGER_BUCKET", "") == ""


def test_the_cleanup_may_delete_the_two_objects_and_runs_after_every_writer_is_gone() -> None:
    cleanup = RESOURCES["IdleLedgerCleanup"]["Properties"]
    assert cleanup["BucketName"] == {"Ref": "IdleLedger"}
    assert cleanup["Keys"] == [idle_ledger.ACTIVITY_KEY, idle_ledger.RECORD_KEY]
    role = RESOURCES["IdleLedgerCleanupRole"]["Properties"]
    (policy,) = role["Policies"]
    grants = [s for s in policy["PolicyDocument"]["Statement"] if s["Action"] == "s3:DeleteObject"]
    assert [g["Resource"] for g in grants] == [[ACTIVITY, RECORD]]
    for name in EXPECTED:
        depends = RESOURCES[name]["DependsOn"]
        assert "IdleLedgerCleanup" in depends, f"{name} could still write while it empties"
    assert RESOURCES["IdleLedger"]["DeletionPolicy"] == "Delete"


def test_the_cleanup_outlasts_its_wait_and_its_calls_and_cloudformation_outlasts_it() -> None:
    from webhook_inbox import aws
    from webhook_inbox.deploy import idle_ledger_cleanup

    timeout = int(FUNCTIONS["IdleLedgerCleanupFunction"]["Timeout"])
    calls = 2 * len(RESOURCES["IdleLedgerCleanup"]["Properties"]["Keys"])
    worst = idle_ledger_cleanup.WRITER_GRACE_S + calls * aws.LEDGER_CLEANUP.worst_case_s
    assert worst < timeout < int(RESOURCES["IdleLedgerCleanup"]["Properties"]["ServiceTimeout"])
    # The wait outlasts every writer's invocation.
    writers = ("IngestFunction", "ProcessorFunction", "OperatorActFunction", "SweeperFunction")
    assert all(int(FUNCTIONS[w]["Timeout"]) < idle_ledger_cleanup.WRITER_GRACE_S for w in writers)
