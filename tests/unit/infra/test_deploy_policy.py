"""The deploy policy is sufficient: every action CloudFormation's handlers call for a resource
the translated template creates, in any variant, is granted by infra/deploy-policy*.json.

Each variant is SAM's own translation of template.yaml for its parameters; its resources are
those whose conditions hold. The actions per resource type come from
webhook_inbox_tools/deploy_policy/resource_actions.json (the registry schemas' handler
permissions, see infra/build_deploy_policy.py): a type missing there fails, as does an action
no statement grants, with IAM's wildcard matching.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest

from tests.infra_support import (
    ROOT,
    Placeholders,
    Resolver,
    load_template,
    parameter_values,
    rule_failures,
    translated_template,
)
from webhook_inbox_tools import deploy_policy

HANDLERS = ("create", "read", "update", "delete")
REGION_ACCOUNT = "us-east-1:123456789012"
MANAGED_POLICY_LIMIT = 6144  # characters without whitespace, per customer managed policy


def _small(env: str = "small") -> dict[str, str]:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    overrides = config[env]["deploy"]["parameters"]["parameter_overrides"]
    return dict(item.split("=", 1) for item in overrides)


EXISTING_VPC = {
    "VpcId": "vpc-0abc",
    "SubnetIds": "subnet-a,subnet-b",
    "PrivateRouteTableIds": "rtb-1",
}
VARIANTS: dict[str, dict[str, str]] = {
    "own network": {},
    "own network, FunctionUrl": {"Endpoint": "FunctionUrl"},
    "own network, chosen zones, SNS outbox": {
        "NewVpcZones": "us-east-1b,us-east-1c",
        "OutboxDestination": "sns",
        "AlarmEmail": "ops@example.com",
    },
    "existing VPC": EXISTING_VPC,
    "existing VPC, FunctionUrl, no endpoints": {
        **EXISTING_VPC,
        "Endpoint": "FunctionUrl",
        "CreateVpcEndpoints": "false",
    },
    "existing VPC and database": {
        **EXISTING_VPC,
        "DatabaseSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbCdEf",
    },
    "small": _small(),
    "aurora-paused": _small("aurora-paused"),
    "Aurora provisioned behind RDS Proxy, a reader, existing VPC": {
        **EXISTING_VPC,
        "DatabaseEngine": "aurora-postgresql",
        "DatabaseInstanceClass": "db.t4g.medium",
    },
}


def created(overrides: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The translated template's resources these parameters create."""
    resolver = Resolver(parameter_values(**overrides), Placeholders())
    assert rule_failures(resolver) == [], "a variant CloudFormation would refuse"
    resources = translated_template(**overrides)["Resources"]
    return {
        name: res
        for name, res in resources.items()
        if "Condition" not in res or resolver.condition(res["Condition"])
    }


def required_actions(types: set[str]) -> dict[str, set[str]]:
    """action -> the resource types (or deploy tools) that need it."""
    data = deploy_policy.resource_actions()
    needed: dict[str, set[str]] = {}
    for kind in types:
        entry = data["resource_types"][kind]
        for handler in HANDLERS:
            for action in entry.get(handler, []):
                needed.setdefault(action, set()).add(kind)
    for why, actions in data["deploy_tools"].items():
        for action in actions:
            needed.setdefault(action, set()).add(why)
    return needed


def granted_patterns() -> list[str]:
    return [a for s in deploy_policy.statements() if s["Effect"] == "Allow" for a in s["Action"]]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_resource_type_of_the_variant_has_its_actions(variant: str) -> None:
    types = {res["Type"] for res in created(VARIANTS[variant]).values()}
    known = deploy_policy.resource_actions()["resource_types"]
    assert types - known.keys() == set(), "add the type to resource_actions.json"
    for kind in types:
        assert known[kind]["source"], kind
        assert any(known[kind].get(h) for h in ("create", "delete")), kind


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_policy_grants_every_action_the_variant_needs(variant: str) -> None:
    types = {res["Type"] for res in created(VARIANTS[variant]).values()}
    patterns = granted_patterns()
    missing = {
        action: sorted(why)
        for action, why in required_actions(types).items()
        if not deploy_policy.granted(action, patterns)
    }
    assert missing == {}


def test_the_variants_cover_every_type_the_template_can_create() -> None:
    """The union over the variants is every type of the translation, so no conditional
    resource escapes the check above."""
    every = {res["Type"] for res in translated_template()["Resources"].values()}
    seen = {res["Type"] for v in VARIANTS.values() for res in created(v).values()}
    assert seen == every


def test_cloudformation_may_wait_for_lambdas_network_interfaces() -> None:
    """Without it CloudFormation cannot tell when a VPC function's interfaces are gone: the
    rollback or delete of the own network ends ROLLBACK_FAILED / DELETE_FAILED."""
    assert deploy_policy.granted("ec2:DescribeNetworkInterfaces", granted_patterns())
    data = deploy_policy.resource_actions()
    assert (
        "ec2:DescribeNetworkInterfaces" in data["resource_types"]["AWS::Lambda::Function"]["delete"]
    )


def test_a_missing_action_would_be_found() -> None:
    """The matcher is IAM's: a family covers its members, nothing else."""
    assert deploy_policy.granted("ec2:DescribeNetworkInterfaces", ["ec2:Describe*"])
    assert deploy_policy.granted("EC2:describenetworkinterfaces", ["ec2:Describe*"])
    assert not deploy_policy.granted("ec2:DeleteVpc", ["ec2:Describe*", "ec2:DeleteVpcEndpoints"])
    assert deploy_policy.granted("lambda:GetLayerVersion", ["lambda:Get?ayerVersion"])


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_left_out_actions_are_for_properties_the_template_never_sets(variant: str) -> None:
    data = deploy_policy.resource_actions()["resource_types"]
    for name, res in created(VARIANTS[variant]).items():
        for unused in data[res["Type"]].get("not_needed", []):
            set_here = set(unused["only_for_properties"]) & set(res.get("Properties", {}))
            assert not set_here, f"{name} sets {set_here}: grant {unused['actions']}"


def test_each_document_fits_a_managed_policy_and_infra_has_them() -> None:
    for name, document in zip(deploy_policy.FILES, deploy_policy.documents(), strict=True):
        assert len(re.sub(r"\s", "", (ROOT / "infra" / name).read_text())) <= MANAGED_POLICY_LIMIT
        assert (ROOT / "infra" / name).read_text() == (
            ROOT / "tools" / "webhook_inbox_tools" / "deploy_policy" / name
        ).read_text()
        sids = [s["Sid"] for s in document["Statement"]]
        assert len(sids) == len(set(sids))


def test_only_the_stacks_own_names_are_scoped_and_another_stack_gets_its_own() -> None:
    other = deploy_policy.statements("billing-hooks")
    assert "webhook-inbox" not in str(other)
    roles = next(s for s in other if s["Sid"] == "IamRole")
    assert roles["Resource"] == ["arn:aws:iam::*:role/billing-hooks-*"]
    passing = [s for s in other if deploy_policy.granted("iam:PassRole", s["Action"])]
    assert [s["Resource"] for s in passing] == [["arn:aws:iam::*:role/billing-hooks-*"]]


def _resolved_names(kind: str, prop: str) -> list[str]:
    resolver = Resolver(parameter_values(), Placeholders())
    return [
        str(resolver.resolve(res["Properties"][prop]))
        for res in load_template()["Resources"].values()
        if res["Type"] == kind and prop in res.get("Properties", {})
    ]


@pytest.mark.parametrize(
    ("kind", "prop", "arn"),
    [
        ("AWS::Logs::LogGroup", "LogGroupName", f"arn:aws:logs:{REGION_ACCOUNT}:log-group:{{}}:*"),
        ("AWS::CloudWatch::Alarm", "AlarmName", f"arn:aws:cloudwatch:{REGION_ACCOUNT}:alarm:{{}}"),
        ("AWS::Events::EventBus", "Name", f"arn:aws:events:{REGION_ACCOUNT}:event-bus/{{}}"),
        ("AWS::CloudWatch::Dashboard", "DashboardName", "arn:aws:cloudwatch::123:dashboard/{}"),
    ],
)
def test_the_templates_fixed_names_fall_inside_the_scoped_statements(
    kind: str, prop: str, arn: str
) -> None:
    names = _resolved_names(kind, prop)
    assert names
    scoped = [s for s in deploy_policy.statements() if s["Resource"] != ["*"]]
    for name in names:
        concrete = arn.format(name)
        assert any(
            any(deploy_policy.granted(concrete, [r]) for r in s["Resource"]) for s in scoped
        ), concrete


@pytest.mark.parametrize("stack", ["webhook-inbox", "Billing-Hooks"])
def test_the_stacks_own_bucket_is_in_the_scoped_bucket_statement(stack: str) -> None:
    """CloudFormation names the idle ledger <stack name, lowercased>-idleledger-<random>: the
    statement that may create, configure and delete a bucket covers it, for any stack name,
    and no other stack's bucket."""
    assert "BucketName" not in load_template()["Resources"]["IdleLedger"]["Properties"]
    bucket = f"arn:aws:s3:::{stack.lower()}-idleledger-1a2b3c4d5e6f"
    others = "arn:aws:s3:::someone-elses-bucket"
    kinds = {"AWS::S3::Bucket", "AWS::S3::BucketPolicy"}
    needed = {
        a for a, why in required_actions(kinds).items() if why & kinds and a.startswith("s3:")
    }
    for action in needed:
        scoped = [
            s
            for s in deploy_policy.statements(stack)
            if s["Resource"] != ["*"] and deploy_policy.granted(action, s["Action"])
        ]
        if not scoped:
            continue  # granted on "*" (an action S3 cannot authorise on a bucket)
        # An object action (the bucket handler's DeleteObject) is authorised on its objects.
        on = f"{bucket}/activity.json" if "Object" in action else bucket
        assert any(deploy_policy.granted(on, s["Resource"]) for s in scoped), action
        assert not any(deploy_policy.granted(others, s["Resource"]) for s in scoped), action
