"""A failed first create rolls back clean; a healthy stack's database stays protected (issue 26).

The database is created without deletion protection and ``DatabaseProtection`` (a custom
resource) switches it on. That only helps if CloudFormation creates it after every other
resource: anything that can still fail after it would roll back a protected database into
``ROLLBACK_FAILED``. So the resource graph of SAM's translation (what CloudFormation receives) is
walked for each kind of deployment, and every resource it creates must come before the protector.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra_support import (
    Placeholders,
    Resolver,
    load_template,
    parameter_values,
    references,
    translated_template,
)

EXISTING_VPC = {
    "VpcId": "vpc-0abc",
    "SubnetIds": "subnet-a,subnet-b",
    "PrivateRouteTableIds": "rtb-1",
}
DEPLOYMENTS = {
    "defaults": {},
    "small": {
        "CreateDatabaseProxy": "false",
        "DatabaseMultiAz": "false",
        "CreateDashboard": "false",
    },
    "function-url-sns-email": {
        "Endpoint": "FunctionUrl",
        "OutboxDestination": "sns",
        "AlarmEmail": "ops@example.com",
    },
    "existing-vpc": EXISTING_VPC,
    "existing-vpc-no-proxy-url": {
        **EXISTING_VPC,
        "CreateDatabaseProxy": "false",
        "Endpoint": "FunctionUrl",
    },
    "existing-vpc-own-group": {**EXISTING_VPC, "SecurityGroupId": "sg-0abc"},
    "no-operator-functions": {"CreateOperatorFunctions": "false"},
}


def resolver(**params: str) -> Resolver:
    return Resolver(parameter_values(**params), Placeholders(), "webhook-inbox")


def created(template: dict[str, Any], r: Resolver) -> dict[str, dict[str, Any]]:
    return {
        name: res
        for name, res in template["Resources"].items()
        if "Condition" not in res or r.condition(res["Condition"])
    }


def prerequisites(template: dict[str, Any], r: Resolver) -> dict[str, set[str]]:
    """Each created resource -> the created resources CloudFormation must create before it."""
    resources = created(template, r)
    graph = {}
    for name, res in resources.items():
        depends = res.get("DependsOn", [])
        targets = references(res.get("Properties", {}), r) | set(
            [depends] if isinstance(depends, str) else depends
        )
        graph[name] = targets & set(resources)
    return graph


def ancestors(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_the_protection_is_created_after_every_other_resource(deployment: str) -> None:
    r = resolver(**DEPLOYMENTS[deployment])
    graph = prerequisites(translated_template(), r)
    assert "DatabaseProtection" in graph
    missing = set(graph) - ancestors(graph, "DatabaseProtection") - {"DatabaseProtection"}
    assert missing == set(), f"not created before the protection: {sorted(missing)}"


def test_the_graph_walk_sees_a_resource_that_could_fail_after_the_protection() -> None:
    template = translated_template()
    r = resolver()
    extra = dict(template, Resources=dict(template["Resources"]))
    extra["Resources"]["LateTopic"] = {"Type": "AWS::SNS::Topic", "Properties": {}}
    graph = prerequisites(extra, r)
    assert "LateTopic" not in ancestors(graph, "DatabaseProtection")


def test_no_existing_database_no_protection() -> None:
    r = resolver(DatabaseSecretArn="arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbC")
    assert "DatabaseProtection" not in created(load_template(), r)


def test_the_database_is_created_unprotected_and_snapshotted_whatever_removes_it() -> None:
    database = load_template()["Resources"]["Database"]
    assert database["Properties"]["DeletionProtection"] is False
    assert database["DeletionPolicy"] == "Snapshot"
    assert database["UpdateReplacePolicy"] == "Snapshot"


def test_the_protection_names_the_instance_and_the_stack_and_reruns_on_settings_changes() -> None:
    props = load_template()["Resources"]["DatabaseProtection"]["Properties"]
    assert props["DBInstanceIdentifier"] == {"Ref": "Database"}
    assert props["StackId"] == {"Ref": "AWS::StackId"}
    settings = resolver(DatabaseInstanceClass="db.t4g.micro").resolve(props["DatabaseSettings"])
    assert "db.t4g.micro" in settings


def test_the_protector_may_switch_only_this_database_and_read_only_this_stack() -> None:
    role = load_template()["Resources"]["DatabaseProtectionRole"]["Properties"]
    (policy,) = role["Policies"]
    by_sid = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    modify = by_sid["SwitchThisDatabasesDeletionProtection"]
    assert modify["Action"] == "rds:ModifyDBInstance"
    arn = resolver().resolve(modify["Resource"])
    assert arn == "arn:aws:rds:us-east-1:123456789012:db:<Database>"
    describe = by_sid["ReadThisStacksStatus"]
    assert describe["Action"] == "cloudformation:DescribeStacks"
    assert describe["Resource"] == {"Ref": "AWS::StackId"}


def test_the_schedule_names_this_instance_and_goes_before_it_on_delete() -> None:
    """The hourly rule's input names the instance and the stack, so CloudFormation deletes the
    rule before the database (a reference orders deletes in reverse): `sam delete` never meets
    a protection the schedule put back. The role may read only this instance's settings."""
    template = translated_template()
    r = resolver()
    rule = template["Resources"]["DatabaseProtectionFunctionReapplyProtection"]
    (target,) = rule["Properties"]["Targets"]
    assert "Database" in references(target["Input"], r)
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 hour)"
    reapply = json.loads(r.resolve(target["Input"]))["reapply"]
    assert reapply["DBInstanceIdentifier"] == "<Database>"
    assert reapply["StackId"].startswith("arn:aws:cloudformation:us-east-1:123456789012:stack/")
    role = load_template()["Resources"]["DatabaseProtectionRole"]["Properties"]
    (policy,) = role["Policies"]
    by_sid = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    read = by_sid["ReadThisDatabasesProtection"]
    assert read["Action"] == "rds:DescribeDBInstances"
    assert r.resolve(read["Resource"]) == "arn:aws:rds:us-east-1:123456789012:db:<Database>"
