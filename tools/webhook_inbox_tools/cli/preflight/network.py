"""The VPC the functions run in: its subnets, their route tables, and the S3 route the schema
custom resource answers CloudFormation through."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook_inbox_tools.cli.preflight.common import FAIL, OK, Clients, Finding, Options

# Both must be on for an interface endpoint with private DNS (the API creates VPCs without DNS
# hostnames; the console's wizard and the default VPC have them): attribute -> the option of
# `aws ec2 modify-vpc-attribute` that turns it on.
VPC_DNS_ATTRIBUTES = {
    "enableDnsSupport": "--enable-dns-support",
    "enableDnsHostnames": "--enable-dns-hostnames",
}


@dataclass
class Network:
    subnets: list[dict[str, Any]]
    route_table_of: dict[str, dict[str, Any]]  # subnet id -> its route table
    endpoints: list[dict[str, Any]]
    dns: dict[str, bool] = field(default_factory=dict)  # enableDnsSupport, enableDnsHostnames


def service_of(endpoint: dict[str, Any]) -> str:
    return str(endpoint["ServiceName"]).rsplit(".", 1)[-1]


def read_network(aws: Clients, opts: Options) -> Network:
    subnets = aws.ec2.describe_subnets(SubnetIds=opts.subnet_ids)["Subnets"]
    tables = aws.ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [opts.vpc_id]}])
    main: dict[str, Any] = next(
        (t for t in tables["RouteTables"] if any(a.get("Main") for a in t["Associations"])), {}
    )
    route_table_of = {}
    for subnet in subnets:
        explicit = [
            t
            for t in tables["RouteTables"]
            if any(a.get("SubnetId") == subnet["SubnetId"] for a in t["Associations"])
        ]
        route_table_of[subnet["SubnetId"]] = explicit[0] if explicit else main
    endpoints = [
        e
        for e in aws.ec2.describe_vpc_endpoints(
            Filters=[{"Name": "vpc-id", "Values": [opts.vpc_id]}]
        )["VpcEndpoints"]
        if e.get("State", "available").lower() not in {"deleted", "deleting", "failed", "rejected"}
    ]
    dns = {
        attribute: bool(
            aws.ec2.describe_vpc_attribute(VpcId=opts.vpc_id, Attribute=attribute)[
                attribute[0].upper() + attribute[1:]
            ]["Value"]
        )
        for attribute in VPC_DNS_ATTRIBUTES
    }
    return Network(subnets, route_table_of, endpoints, dns)


def _default_route(table: dict[str, Any]) -> dict[str, Any]:
    return next(
        (r for r in table.get("Routes", []) if r.get("DestinationCidrBlock") == "0.0.0.0/0"), {}
    )


# Default-route targets that carry traffic on towards public AWS endpoints. A NAT is the common
# one; a transit gateway, Cloud WAN, a virtual private gateway or a Gateway Load Balancer
# endpoint lead to an inspection or hub VPC that has one (preflight cannot see beyond them).
EGRESS_TARGETS = (
    ("NatGatewayId", "NAT gateway"),
    ("TransitGatewayId", "transit gateway"),
    ("CoreNetworkArn", "Cloud WAN core network"),
    ("NetworkInterfaceId", "network interface (NAT instance or appliance)"),
    ("InstanceId", "instance (NAT instance)"),
    ("LocalGatewayId", "Outposts local gateway"),
)
EGRESS_GATEWAYS = {"vgw-": "virtual private gateway", "vpce-": "Gateway Load Balancer endpoint"}


def ipv4_egress(table: dict[str, Any]) -> str:
    """What carries the table's traffic to public IPv4 addresses, '' when nothing does. A peering
    connection does not: AWS never forwards through a peer's NAT or gateways (no edge-to-edge
    routing)."""
    route = _default_route(table)
    if route.get("State") == "blackhole":
        return ""
    for key, kind in EGRESS_TARGETS:
        if route.get(key):
            return f"{kind} {route[key]}"
    gateway = str(route.get("GatewayId", ""))
    return next(
        (
            f"{kind} {gateway}"
            for prefix, kind in EGRESS_GATEWAYS.items()
            if gateway.startswith(prefix)
        ),
        "",
    )


def ipv6_egress(table: dict[str, Any]) -> str:
    """The egress-only internet gateway the table sends ::/0 to, '' when none."""
    route: dict[str, Any] = next(
        (r for r in table.get("Routes", []) if r.get("DestinationIpv6CidrBlock") == "::/0"), {}
    )
    if route.get("State") == "blackhole":
        return ""
    return str(route.get("EgressOnlyInternetGatewayId", ""))


def s3_gateway_tables(net: Network) -> set[str]:
    return {
        table
        for e in net.endpoints
        if e.get("VpcEndpointType") == "Gateway" and service_of(e) == "s3"
        for table in e.get("RouteTableIds", [])
    }


def check_subnets(opts: Options, net: Network) -> list[Finding]:
    findings = []
    elsewhere = [s["SubnetId"] for s in net.subnets if s["VpcId"] != opts.vpc_id]
    if elsewhere:
        findings.append(
            Finding(
                FAIL,
                "subnets",
                f"{', '.join(elsewhere)} not in {opts.vpc_id}",
                "pick subnets of VpcId",
            )
        )
    zones = sorted({s["AvailabilityZone"] for s in net.subnets})
    if len(zones) < 2:
        findings.append(
            Finding(
                FAIL,
                "subnets",
                f"all in {', '.join(zones) or 'no zone'}: RDS and RDS Proxy need two AZs",
                "add a private subnet in a second Availability Zone to SubnetIds",
            )
        )
    public = [
        sid
        for sid, table in net.route_table_of.items()
        if str(_default_route(table).get("GatewayId", "")).startswith("igw-")
    ]
    if public:
        findings.append(
            Finding(
                FAIL,
                "subnets",
                f"{', '.join(public)} route 0.0.0.0/0 to an internet gateway: public, and a "
                "Lambda function there has no internet access",
                "use private subnets (no internet gateway route) for SubnetIds",
            )
        )
    if not findings:
        findings.append(
            Finding(OK, "subnets", f"{len(net.subnets)} private subnets in {', '.join(zones)}")
        )
    return findings


def check_s3_route(opts: Options, net: Network) -> list[Finding]:
    """The schema custom resource answers CloudFormation with a PUT to a pre-signed S3 URL, and
    the functions read and write the idle ledger's bucket: both through the subnets' S3 route."""
    check = "S3 route (custom resource, idle ledger)"
    tables_with_s3 = s3_gateway_tables(net)
    subnet_tables = {sid: t.get("RouteTableId", "") for sid, t in net.route_table_of.items()}
    needed = sorted(set(subnet_tables.values()))
    if not opts.create_vpc_endpoints:
        return _s3_through_egress(net, tables_with_s3, needed)
    if "s3" in opts.existing_vpc_endpoints:
        return _s3_through_existing_gateway(tables_with_s3, needed)
    if tables_with_s3 & set(needed):
        return [
            Finding(
                FAIL,
                check,
                f"{', '.join(sorted(tables_with_s3 & set(needed)))} already have an S3 gateway "
                "endpoint: a second one on the same route table fails",
                "add s3 to ExistingVpcEndpoints (and leave PrivateRouteTableIds empty)",
            )
        ]
    missing = sorted(set(needed) - set(opts.route_table_ids))
    if missing:
        return [
            Finding(
                FAIL,
                check,
                "no S3 gateway endpoint would serve "
                + ", ".join(sid for sid, t in subnet_tables.items() if t in missing)
                + ": the stack would time out and fail to roll back",
                f"set PrivateRouteTableIds={','.join(needed)}",
            )
        ]
    return [Finding(OK, check, f"the stack adds an S3 gateway endpoint to {', '.join(needed)}")]


def _s3_through_egress(net: Network, tables_with_s3: set[str], needed: list[str]) -> list[Finding]:
    check = "S3 route (custom resource, idle ledger)"
    routes = {
        sid: ("S3 gateway endpoint" if t.get("RouteTableId") in tables_with_s3 else ipv4_egress(t))
        for sid, t in net.route_table_of.items()
    }
    stranded = sorted(sid for sid, route in routes.items() if not route)
    if stranded:
        peered = [
            sid
            for sid in stranded
            if _default_route(net.route_table_of[sid]).get("VpcPeeringConnectionId")
        ]
        return [
            Finding(
                FAIL,
                check,
                f"CreateVpcEndpoints=false but {', '.join(stranded)} have neither an S3 gateway "
                "endpoint nor a way out (NAT, transit gateway, Cloud WAN, virtual private gateway, "
                "Gateway Load Balancer endpoint): the custom resource cannot answer "
                "CloudFormation, and the sweeper cannot read the idle ledger"
                + (
                    f" ({', '.join(peered)}: a peering connection does not carry traffic beyond "
                    "the peer VPC)"
                    if peered
                    else ""
                ),
                f"set CreateVpcEndpoints=true PrivateRouteTableIds={','.join(needed)}",
            )
        ]
    ways = "; ".join(sorted(set(routes.values())))
    return [Finding(OK, check, f"every subnet reaches S3 through {ways}")]


def _s3_through_existing_gateway(tables_with_s3: set[str], needed: list[str]) -> list[Finding]:
    check = "S3 route (custom resource, idle ledger)"
    missing = sorted(t for t in needed if t not in tables_with_s3)
    if missing:
        return [
            Finding(
                FAIL,
                check,
                f"ExistingVpcEndpoints lists s3, but {', '.join(missing)} have no S3 gateway "
                "endpoint",
                f"remove s3 from ExistingVpcEndpoints and set "
                f"PrivateRouteTableIds={','.join(needed)}",
            )
        ]
    return [Finding(OK, check, "the VPC's S3 gateway endpoint serves every subnet")]
