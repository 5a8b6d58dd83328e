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
    "aurora-serverless-paused": {
        "DatabaseEngine": "aurora-serverless-v2",
        "CreateDatabaseProxy": "false",
        "DatabaseMultiAz": "false",
    },
    "aurora-provisioned-proxy-reader": {
        "DatabaseEngine": "aurora-postgresql",
        "DatabaseInstanceClass": "db.t4g.medium",
    },
    "aurora-serverless-existing-vpc": {
        **EXISTING_VPC,
        "DatabaseEngine": "aurora-serverless-v2",
        "AuroraMinCapacity": "0.5",
    },
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
    r = resolver(DatabaseInstanceClass="db.t4g.micro")
    assert r.resolve(props["DBInstanceIdentifier"]) == "<Database>"
    assert r.resolve(props["DBClusterIdentifier"]) is None
    assert props["StackId"] == {"Ref": "AWS::StackId"}
    # What every stack deployed before Aurora was an option sends: unchanged, so no update.
    assert r.resolve(props["DatabaseSettings"]) == "db.t4g.micro|20|true|17"


@pytest.mark.parametrize("engine", ["aurora-postgresql", "aurora-serverless-v2"])
def test_with_aurora_the_protection_is_the_clusters(engine: str) -> None:
    """Deletion protection and the final snapshot belong to the cluster; its instances hold no
    data of their own (their DeletionPolicy is Delete)."""
    resources = load_template()["Resources"]
    props = resources["DatabaseProtection"]["Properties"]
    r = resolver(DatabaseEngine=engine, AuroraMaxCapacity="8")
    assert r.resolve(props["DBClusterIdentifier"]) == "<DatabaseCluster>"
    assert r.resolve(props["DBInstanceIdentifier"]) is None
    assert f"{engine}|" in r.resolve(props["DatabaseSettings"])
    assert "|8|" in r.resolve(props["DatabaseSettings"])
    cluster = resources["DatabaseCluster"]
    assert cluster["Properties"]["DeletionProtection"] is False
    assert (cluster["DeletionPolicy"], cluster["UpdateReplacePolicy"]) == ("Snapshot", "Snapshot")
    for name in ("DatabaseClusterWriter", "DatabaseClusterReader"):
        assert resources[name]["DeletionPolicy"] == "Delete"
    role = resources["DatabaseProtectionRole"]["Properties"]
    (policy,) = role["Policies"]
    (modify,) = [
        s
        for s in policy["PolicyDocument"]["Statement"]
        if s["Sid"] == "SwitchThisDatabasesDeletionProtection"
    ]
    assert r.resolve(modify["Resource"]) == (
        "arn:aws:rds:us-east-1:123456789012:cluster:<DatabaseCluster>"
    )


def test_the_protector_may_switch_only_this_database_and_read_only_this_stack() -> None:
    role = load_template()["Resources"]["DatabaseProtectionRole"]["Properties"]
    (policy,) = role["Policies"]
    by_sid = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    modify = by_sid["SwitchThisDatabasesDeletionProtection"]
    # Both actions, on this one database's ARN: only the one that matches its kind applies.
    assert modify["Action"] == ["rds:ModifyDBInstance", "rds:ModifyDBCluster"]
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
    assert read["Action"] == ["rds:DescribeDBInstances", "rds:DescribeDBClusters"]
    assert r.resolve(read["Resource"]) == "arn:aws:rds:us-east-1:123456789012:db:<Database>"
    # With Aurora the rule names the cluster, and the role reads only the cluster.
    aurora = resolver(DatabaseEngine="aurora-serverless-v2")
    reapply = json.loads(aurora.resolve(target["Input"]))["reapply"]
    assert reapply["DBClusterIdentifier"] == "<DatabaseCluster>"
    assert aurora.resolve(read["Resource"]) == (
        "arn:aws:rds:us-east-1:123456789012:cluster:<DatabaseCluster>"
    )
