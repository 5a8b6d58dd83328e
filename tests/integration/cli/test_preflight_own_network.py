"""The network the stack builds when ``VpcId`` is empty, checked the way preflight checks a user's
VPC (issue 26 §1): its EC2 resources are read from the translated template (every default
parameter), created in moto's EC2 in dependency order with their intrinsics resolved, and
preflight runs against them with the settings the functions get from the same template. It must
report nothing to fix. A new EC2 resource type in the template that this test cannot host fails
it, so the layout checked is always the template's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from tests.infra_support import (
    Placeholders,
    Resolver,
    load_template,
    parameter_values,
    translated_template,
)
from tests.integration.cli.test_preflight import REGION, aws, make_clients
from webhook_inbox_tools.cli import preflight as pf

__all__ = ["aws"]

# What the layout is made of, in the order CloudFormation can create it (each type depends only
# on those before it). Security groups shape no route: preflight reads only those of endpoints
# the stack does not create.
ORDER = (
    "AWS::EC2::VPC",
    "AWS::EC2::VPCCidrBlock",
    "AWS::EC2::Subnet",
    "AWS::EC2::RouteTable",
    "AWS::EC2::SubnetRouteTableAssociation",
    "AWS::EC2::EgressOnlyInternetGateway",
    "AWS::EC2::Route",
    "AWS::EC2::VPCEndpoint",
)
NOT_ROUTING = {
    "AWS::EC2::SecurityGroup",
    "AWS::EC2::SecurityGroupEgress",
    "AWS::EC2::SecurityGroupIngress",
}


class TemplateResolver(Resolver):
    """The template's resolver plus the two intrinsics only the network uses."""

    def resolve(self, value: Any) -> Any:
        if isinstance(value, dict) and len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Fn::GetAZs":
                return [f"{self.region}{zone}" for zone in "abc"]
            if key == "Fn::Cidr":
                block, count, bits = (self.resolve(v) for v in arg)
                network = ipaddress.ip_network(block)
                subnets = network.subnets(new_prefix=network.max_prefixlen - int(bits))
                return [str(next(subnets)) for _ in range(int(count))]
        return super().resolve(value)


class Layout(Placeholders):
    """Logical name (or ``Name.Attribute``) -> the physical value moto gave it; anything the
    layout does not hold reads as ``<Name>`` (the functions' roles, layers, …)."""


def own_network_resolver(layout: Layout) -> TemplateResolver:
    return TemplateResolver(parameter_values(), layout, region=REGION)  # every default


def create(ec2: Any, kind: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Create one resource in moto: its Ref, and its GetAtt attributes."""
    makers: dict[str, Callable[[], tuple[str, dict[str, Any]]]] = {
        "AWS::EC2::VPC": lambda: _vpc(ec2, props),
        "AWS::EC2::VPCCidrBlock": lambda: _vpc_ipv6(ec2, props),
        "AWS::EC2::Subnet": lambda: _subnet(ec2, props),
        "AWS::EC2::RouteTable": lambda: (
            ec2.create_route_table(VpcId=props["VpcId"])["RouteTable"]["RouteTableId"],
            {},
        ),
        "AWS::EC2::SubnetRouteTableAssociation": lambda: (
            ec2.associate_route_table(
                RouteTableId=props["RouteTableId"], SubnetId=props["SubnetId"]
            )["AssociationId"],
            {},
        ),
        "AWS::EC2::EgressOnlyInternetGateway": lambda: (
            ec2.create_egress_only_internet_gateway(VpcId=props["VpcId"])[
                "EgressOnlyInternetGateway"
            ]["EgressOnlyInternetGatewayId"],
            {},
        ),
        "AWS::EC2::Route": lambda: (ec2.create_route(**props) and "route", {}),
        "AWS::EC2::VPCEndpoint": lambda: (
            ec2.create_vpc_endpoint(**props)["VpcEndpoint"]["VpcEndpointId"],
            {},
        ),
    }
    return makers[kind]()


def _vpc(ec2: Any, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    vpc_id = ec2.create_vpc(CidrBlock=props["CidrBlock"])["Vpc"]["VpcId"]
    for attribute in ("EnableDnsSupport", "EnableDnsHostnames"):
        ec2.modify_vpc_attribute(VpcId=vpc_id, **{attribute: {"Value": bool(props[attribute])}})
    return vpc_id, {}


def _vpc_ipv6(ec2: Any, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    assert props["AmazonProvidedIpv6CidrBlock"] is True
    association = ec2.associate_vpc_cidr_block(
        VpcId=props["VpcId"], AmazonProvidedIpv6CidrBlock=True
    )["Ipv6CidrBlockAssociation"]
    return association["AssociationId"], {"Vpc.Ipv6CidrBlocks": [association["Ipv6CidrBlock"]]}


def _subnet(ec2: Any, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    extra = {"Ipv6CidrBlock": props["Ipv6CidrBlock"]} if props.get("Ipv6CidrBlock") else {}
    subnet = ec2.create_subnet(
        VpcId=props["VpcId"],
        CidrBlock=props["CidrBlock"],
        AvailabilityZone=props["AvailabilityZone"],
        **extra,
    )["Subnet"]
    return subnet["SubnetId"], {}


def build_own_network(ec2: Any) -> tuple[Layout, TemplateResolver]:
    """Create every EC2 resource the default parameters create, as CloudFormation would."""
    template = translated_template()
    layout = Layout()
    resolver = own_network_resolver(layout)
    assert resolver.condition("CreateNetwork"), "the defaults must build the stack's own network"
    created = {
        name: res
        for name, res in template["Resources"].items()
        if res["Type"].startswith("AWS::EC2::")
        and ("Condition" not in res or resolver.condition(res["Condition"]))
    }
    unknown = {res["Type"] for res in created.values()} - set(ORDER) - NOT_ROUTING
    assert not unknown, f"teach this test to host {unknown} in moto"
    for kind in ORDER:
        for name, res in created.items():
            if res["Type"] == kind:
                props = resolver.resolve(res.get("Properties", {}))
                props = {k: v for k, v in props.items() if k != "Tags" and v is not None}
                layout[name], attributes = create(ec2, kind, props)
                layout.update(attributes)
    return layout, resolver


def functions_settings(resolver: TemplateResolver) -> dict[str, Any]:
    """What preflight needs to know about the functions, read from the translated template:
    every function in the VPC must use the same subnets and the same dual-stack setting."""
    template = translated_template()
    seen = []
    for res in template["Resources"].values():
        if res["Type"] != "AWS::Lambda::Function":
            continue
        props = resolver.resolve(res["Properties"])
        vpc = props.get("VpcConfig")
        if not vpc:
            continue
        env = (props.get("Environment") or {}).get("Variables", {})
        seen.append(
            (
                tuple(vpc["SubnetIds"]),
                bool(vpc.get("Ipv6AllowedForDualStack")),
                env.get("AWS_USE_DUALSTACK_ENDPOINT") == "true",
            )
        )
    assert seen, "no function runs in the VPC"
    assert len(set(seen)) == 1, f"the functions disagree on their network: {set(seen)}"
    subnets, ipv6_allowed, dual_stack_endpoints = seen[0]
    return {
        "subnet_ids": list(subnets),
        "functions_use_dual_stack": ipv6_allowed and dual_stack_endpoints,
    }


@pytest.fixture
def own_network(aws: None) -> tuple[Layout, TemplateResolver]:
    if "CreateNetwork" not in load_template().get("Conditions", {}):
        pytest.fail("template.yaml has no CreateNetwork condition: the own network is missing")
    return build_own_network(boto3.client("ec2", region_name=REGION))


def own_network_options(layout: Layout, resolver: TemplateResolver, **overrides: Any) -> pf.Options:
    """The stack's own network seen as a VPC preflight is given: the template's VPC, the
    functions' subnets, and the endpoint settings the template applies there."""
    (vpc,) = _names_of("AWS::EC2::VPC")
    settings = {
        "region": REGION,
        "vpc_id": layout[vpc],
        "create_vpc_endpoints": resolver.condition("CreateEndpoints"),
        **functions_settings(resolver),
        **overrides,
    }
    return pf.Options(**settings)


def _names_of(kind: str) -> set[str]:
    return {n for n, r in translated_template()["Resources"].items() if r["Type"] == kind}


def test_preflight_finds_nothing_to_fix_in_the_stacks_own_network(
    own_network: tuple[Layout, TemplateResolver],
) -> None:
    layout, resolver = own_network
    opts = own_network_options(layout, resolver)
    found = pf.run(make_clients(), opts)
    failed = [f for f in found if f.status == pf.FAIL]
    assert failed == [], pf.render(found)
    checks = {f.check: f for f in found}
    assert checks["subnets"].status == pf.OK
    assert "S3 gateway endpoint" in checks["S3 route (custom resource, idle ledger)"].detail
    assert "IPv6 (egress-only internet gateway" in checks["VPC endpoints"].detail
    sns = own_network_options(layout, resolver, outbox_destination="sns")
    assert [f for f in pf.run(make_clients(), sns) if f.status == pf.FAIL] == []


def test_the_same_network_without_dual_stack_functions_reaches_nothing(
    own_network: tuple[Layout, TemplateResolver],
) -> None:
    """IPv6 is the only way out: functions that do not use it could call no service."""
    layout, resolver = own_network
    opts = own_network_options(layout, resolver, functions_use_dual_stack=False)
    failed = [f for f in pf.run(make_clients(), opts) if f.status == pf.FAIL]
    assert [f.check for f in failed] == ["VPC endpoints"]
    assert "reach no sqs, secretsmanager, events" in failed[0].detail
