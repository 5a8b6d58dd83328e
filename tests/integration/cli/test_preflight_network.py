"""Preflight's network checks as the account really behaves (issue 26 §4): Route 53 private zones
and Profiles, shared-services and existing endpoints (security groups, policies), ways out other
than a NAT gateway, IPv6 to dual-stack endpoints. Each has a layout that must fail and one that
must pass, in moto (botocore's Stubber only where moto lacks the call)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import boto3
from botocore.stub import Stubber

from tests.integration.cli.test_preflight import (
    REAL_CLIENTS,
    REGION,
    Vpc,
    aws,
    ec2,
    failures,
    findings,
    make_clients,
    of,
    only_failure,
    options,
    vpc,
)
from webhook_inbox_tools.cli import preflight as pf

__all__ = ["aws", "ec2", "vpc"]  # fixtures, shared with test_preflight


def private_zone(vpc: Vpc, name: str) -> str:
    route53 = boto3.client("route53", region_name=REGION)
    return str(
        route53.create_hosted_zone(
            Name=name,
            CallerReference=name,
            VPC={"VPCRegion": REGION, "VPCId": vpc.vpc_id},
            HostedZoneConfig={"PrivateZone": True, "Comment": "shared-services endpoint"},
        )["HostedZone"]["Id"]
    ).rsplit("/", 1)[-1]


def https_group(ec2: Any, vpc: Vpc, **source: Any) -> str:
    group = ec2.create_security_group(GroupName="endpoints", Description="e", VpcId=vpc.vpc_id)
    permission = {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, **source}
    ec2.authorize_security_group_ingress(GroupId=group["GroupId"], IpPermissions=[permission])
    return str(group["GroupId"])


def sqs_endpoint(ec2: Any, vpc: Vpc, group: str, policy: dict[str, Any] | None = None) -> str:
    extra = {"PolicyDocument": json.dumps(policy)} if policy else {}
    return str(
        ec2.create_vpc_endpoint(
            VpcId=vpc.vpc_id,
            ServiceName=f"com.amazonaws.{REGION}.sqs",
            VpcEndpointType="Interface",
            SubnetIds=vpc.subnets,
            SecurityGroupIds=[group],
            PrivateDnsEnabled=True,
            **extra,
        )["VpcEndpoint"]["VpcEndpointId"]
    )


# --- Route 53 private hosted zones and Profiles ----------------------------------------------


def test_a_private_zone_for_an_endpoint_name_collides_like_an_endpoint(vpc: Vpc) -> None:
    zone = private_zone(vpc, f"sqs.{REGION}.amazonaws.com")
    finding = only_failure(options(vpc), "VPC endpoints")
    assert zone in finding.detail
    assert "conflicting DNS domain" in finding.detail
    assert finding.fix.startswith("set ExistingVpcEndpoints=sqs ")
    assert failures(options(vpc, existing_vpc_endpoints=["sqs"])) == []


def test_a_zone_for_another_name_does_not_collide(vpc: Vpc) -> None:
    private_zone(vpc, "internal.example.com")
    assert failures(options(vpc)) == []


def test_shared_services_endpoints_behind_a_private_zone_are_reused(vpc: Vpc) -> None:
    """Listed in ExistingVpcEndpoints, living in another VPC: a FAIL on 5276659."""
    opts = options(vpc, existing_vpc_endpoints=["secretsmanager"])
    assert "no such endpoint" in only_failure(opts, "VPC endpoints").detail
    zone = private_zone(vpc, f"secretsmanager.{REGION}.amazonaws.com")
    found = findings(opts)
    assert [f for f in found if f.status == pf.FAIL] == []
    (endpoints,) = of(found, "VPC endpoints")
    assert zone in endpoints.detail
    assert "shared-services" in endpoints.detail


def test_a_zone_for_a_parent_domain_warns(vpc: Vpc) -> None:
    private_zone(vpc, f"{REGION}.amazonaws.com")
    found = findings(options(vpc))
    assert [f for f in found if f.status == pf.FAIL] == []
    warned = [f for f in of(found, "VPC endpoints") if f.status == pf.WARN]
    assert len(warned) == 3  # sqs, secretsmanager, events: each name is under the zone
    assert f"answers for sqs.{REGION}.amazonaws.com" in warned[0].detail


def test_a_listed_endpoint_with_private_dns_off_does_not_serve_the_functions(
    vpc: Vpc, ec2: Any
) -> None:
    endpoint = ec2.create_vpc_endpoint(
        VpcId=vpc.vpc_id,
        ServiceName=f"com.amazonaws.{REGION}.sqs",
        VpcEndpointType="Interface",
        SubnetIds=vpc.subnets,
        PrivateDnsEnabled=False,
    )["VpcEndpoint"]["VpcEndpointId"]
    finding = only_failure(options(vpc, existing_vpc_endpoints=["sqs"]), "VPC endpoints")
    assert "private DNS off" in finding.detail
    assert (
        finding.fix
        == f"aws ec2 modify-vpc-endpoint --vpc-endpoint-id {endpoint} --private-dns-enabled"
    )
    assert failures(options(vpc)) == []  # not listed: the stack creates its own beside it


def test_route53_profiles_moto_lacks_are_could_not_check_not_a_failure(vpc: Vpc) -> None:
    (profiles,) = of(findings(options(vpc)), "Route 53 Profiles")
    assert profiles.status == pf.WARN
    assert profiles.detail.startswith("could not check: this endpoint does not implement")


def profile_clients(zone_name: str) -> pf.Clients:
    """moto has no Route 53 Profiles: a Stubber answers with one profile holding one zone."""
    profiles = boto3.client("route53profiles", region_name=REGION)
    stub = Stubber(profiles)
    stub.add_response("list_profile_associations", {"ProfileAssociations": [{"ProfileId": "rp-1"}]})
    zone_arn = "arn:aws:route53:::hostedzone/ZPROFILE1"
    resource = {"ResourceArn": zone_arn, "ResourceType": "PRIVATE_HOSTED_ZONE"}
    stub.add_response(
        "list_profile_resource_associations", {"ProfileResourceAssociations": [resource]}
    )
    stub.activate()
    route53 = boto3.client("route53", region_name=REGION)
    real_get = route53.get_hosted_zone

    def get_hosted_zone(Id: str) -> dict[str, Any]:
        if Id == "ZPROFILE1":
            return {"HostedZone": {"Id": Id, "Name": zone_name + ".", "CallerReference": "p"}}
        return dict(real_get(Id=Id))

    route53.get_hosted_zone = get_hosted_zone  # type: ignore[method-assign]
    lambda_clients = make_clients()
    clients = {"route53profiles": profiles, "route53": route53, "lambda": lambda_clients.lambda_}
    return REAL_CLIENTS(REGION, lambda s: clients.get(s) or boto3.client(s, region_name=REGION))


def test_a_zone_a_route53_profile_brings_collides_too(vpc: Vpc) -> None:
    found = failures(options(vpc), profile_clients(f"events.{REGION}.amazonaws.com"))
    assert [f.check for f in found] == ["VPC endpoints"]
    assert "Route 53 Profile rp-1" in found[0].detail
    assert failures(options(vpc), profile_clients("corp.example.com")) == []


# --- existing endpoints: security groups and policies -----------------------------------------


def test_an_existing_endpoint_must_accept_https_from_the_subnets(vpc: Vpc, ec2: Any) -> None:
    closed = ec2.create_security_group(GroupName="closed", Description="c", VpcId=vpc.vpc_id)
    sqs_endpoint(ec2, vpc, closed["GroupId"])
    finding = only_failure(
        options(vpc, existing_vpc_endpoints=["sqs"]), "existing endpoints' access"
    )
    assert "accept no HTTPS" in finding.detail
    assert closed["GroupId"] in finding.fix


def test_an_endpoint_open_to_the_vpc_passes(vpc: Vpc, ec2: Any) -> None:
    sqs_endpoint(ec2, vpc, https_group(ec2, vpc, IpRanges=[{"CidrIp": "10.0.0.0/16"}]))
    assert failures(options(vpc, existing_vpc_endpoints=["sqs"])) == []


def test_an_endpoint_open_only_to_other_groups_warns_unless_it_is_ours(vpc: Vpc, ec2: Any) -> None:
    ours = ec2.create_security_group(GroupName="fn", Description="f", VpcId=vpc.vpc_id)["GroupId"]
    group = https_group(ec2, vpc, UserIdGroupPairs=[{"GroupId": ours}])
    sqs_endpoint(ec2, vpc, group)
    (access,) = of(
        findings(options(vpc, existing_vpc_endpoints=["sqs"])), "existing endpoints' access"
    )
    assert access.status == pf.WARN
    assert ours in access.detail
    with_ours = options(vpc, existing_vpc_endpoints=["sqs"], security_group_id=ours)
    (access,) = of(findings(with_ours), "existing endpoints' access")
    assert access.status == pf.OK


def test_an_endpoint_policy_that_does_not_allow_send_message_fails(vpc: Vpc, ec2: Any) -> None:
    group = https_group(ec2, vpc, IpRanges=[{"CidrIp": "10.0.0.0/16"}])
    receive_only = {
        "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "sqs:ReceiveMessage", "Resource": "*"}
        ]
    }
    sqs_endpoint(ec2, vpc, group, receive_only)
    finding = only_failure(
        options(vpc, existing_vpc_endpoints=["sqs"]), "existing endpoints' access"
    )
    assert "sqs:SendMessage" in finding.detail


def test_an_endpoint_policy_limited_to_the_org_warns(vpc: Vpc, ec2: Any) -> None:
    group = https_group(ec2, vpc, IpRanges=[{"CidrIp": "10.0.0.0/16"}])
    statement = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "sqs:*",
        "Resource": "*",
        "Condition": {"StringEquals": {"aws:PrincipalOrgID": "o-abc"}},
    }
    sqs_endpoint(ec2, vpc, group, {"Statement": [statement]})
    found = findings(options(vpc, existing_vpc_endpoints=["sqs"]))
    assert [f.status for f in of(found, "existing endpoints' access")] == [pf.WARN]
    assert [f for f in found if f.status == pf.FAIL] == []


# --- ways out other than a NAT gateway ---------------------------------------------------------


def route_all(ec2: Any, vpc: Vpc, **target: str) -> None:
    for table in vpc.route_tables:
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", **target)


def test_a_transit_gateway_is_a_way_out(vpc: Vpc, ec2: Any) -> None:
    """A FAIL on 5276659 only for the other targets below; kept as the reference."""
    tgw = ec2.create_transit_gateway()["TransitGateway"]["TransitGatewayId"]
    route_all(ec2, vpc, TransitGatewayId=tgw)
    found = findings(options(vpc, create_vpc_endpoints=False, route_table_ids=[]))
    assert [f for f in found if f.status == pf.FAIL] == []
    assert tgw in of(found, "VPC endpoints")[0].detail


def test_a_virtual_private_gateway_is_a_way_out(vpc: Vpc, ec2: Any) -> None:
    vgw = ec2.create_vpn_gateway(Type="ipsec.1")["VpnGateway"]["VpnGatewayId"]
    route_all(ec2, vpc, GatewayId=vgw)
    assert failures(options(vpc, create_vpc_endpoints=False, route_table_ids=[])) == []


def test_a_gateway_load_balancer_endpoint_is_a_way_out(vpc: Vpc, ec2: Any) -> None:
    inspection = ec2.create_vpc_endpoint(
        VpcId=vpc.vpc_id,
        ServiceName=f"com.amazonaws.vpce.{REGION}.vpce-svc-0inspection",
        VpcEndpointType="GatewayLoadBalancer",
        SubnetIds=vpc.subnets[:1],
    )["VpcEndpoint"]["VpcEndpointId"]
    route_all(ec2, vpc, VpcEndpointId=inspection)
    assert failures(options(vpc, create_vpc_endpoints=False, route_table_ids=[])) == []


def test_cloud_wan_is_a_way_out_and_a_blackhole_is_not() -> None:
    """moto keeps no CoreNetworkArn on a route: the route as DescribeRouteTables returns it."""
    from webhook_inbox_tools.cli.preflight.network import ipv4_egress

    core = "arn:aws:networkmanager::123456789012:core-network/core-network-0abc"
    route = {"DestinationCidrBlock": "0.0.0.0/0", "CoreNetworkArn": core, "State": "active"}
    assert ipv4_egress({"Routes": [route]}) == f"Cloud WAN core network {core}"
    assert ipv4_egress({"Routes": [{**route, "State": "blackhole"}]}) == ""


def test_peering_is_no_way_out(vpc: Vpc, ec2: Any) -> None:
    peer = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    pcx = ec2.create_vpc_peering_connection(VpcId=vpc.vpc_id, PeerVpcId=peer)
    route_all(
        ec2, vpc, VpcPeeringConnectionId=pcx["VpcPeeringConnection"]["VpcPeeringConnectionId"]
    )
    found = failures(options(vpc, create_vpc_endpoints=False, route_table_ids=[]))
    assert [f.check for f in found] == ["S3 route (custom resource, idle ledger)", "VPC endpoints"]
    assert "peering connection does not carry traffic" in found[0].detail


def dual_stack(ec2: Any, vpc: Vpc, subnets: list[str]) -> None:
    """An Amazon IPv6 block for the VPC and ``subnets``, ::/0 to an egress-only gateway, and the
    S3 gateway endpoint: the stack's own network, by hand."""
    block = ec2.associate_vpc_cidr_block(VpcId=vpc.vpc_id, AmazonProvidedIpv6CidrBlock=True)
    prefix = block["Ipv6CidrBlockAssociation"]["Ipv6CidrBlock"].split("::")[0]
    for i, subnet in enumerate(subnets):
        ec2.associate_subnet_cidr_block(SubnetId=subnet, Ipv6CidrBlock=f"{prefix}{i:02x}::/64")
    eigw = ec2.create_egress_only_internet_gateway(VpcId=vpc.vpc_id)
    gateway = eigw["EgressOnlyInternetGateway"]["EgressOnlyInternetGatewayId"]
    for table in vpc.route_tables:
        ec2.create_route(
            RouteTableId=table, DestinationIpv6CidrBlock="::/0", EgressOnlyInternetGatewayId=gateway
        )
    ec2.create_vpc_endpoint(
        VpcId=vpc.vpc_id,
        ServiceName=f"com.amazonaws.{REGION}.s3",
        VpcEndpointType="Gateway",
        RouteTableIds=vpc.route_tables,
    )


def test_ipv6_reaches_the_dual_stack_services_when_the_functions_use_it(vpc: Vpc, ec2: Any) -> None:
    dual_stack(ec2, vpc, vpc.subnets)
    opts = options(vpc, create_vpc_endpoints=False, route_table_ids=[], outbox_destination="sns")
    assert "reach no sqs, secretsmanager, sns" in only_failure(opts, "VPC endpoints").detail
    found = findings(replace(opts, functions_use_dual_stack=True))
    assert [f for f in found if f.status == pf.FAIL] == []
    assert "IPv6 (egress-only internet gateway eigw-" in of(found, "VPC endpoints")[0].detail


def test_an_ipv4_only_subnet_gets_nothing_from_an_egress_only_gateway(vpc: Vpc, ec2: Any) -> None:
    dual_stack(ec2, vpc, vpc.subnets[:1])
    opts = options(
        vpc, create_vpc_endpoints=False, route_table_ids=[], functions_use_dual_stack=True
    )
    finding = only_failure(opts, "VPC endpoints")
    assert finding.detail.startswith(f"CreateVpcEndpoints=false, but {vpc.subnets[1]} reach no")
