"""The VPC the functions run in: its subnets, their route tables, and the S3 route the schema
custom resource answers CloudFormation through."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook_inbox_tools.cli.preflight.common import FAIL, OK, Clients, Finding, Options
from webhook_inbox_tools.cli.preflight.endpoints import VPC_DNS_ATTRIBUTES, service_of

# --- network -------------------------------------------------------------------------------


@dataclass
class Network:
    subnets: list[dict[str, Any]]
    route_table_of: dict[str, dict[str, Any]]  # subnet id -> its route table
    endpoints: list[dict[str, Any]]
    dns: dict[str, bool] = field(default_factory=dict)  # enableDnsSupport, enableDnsHostnames


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


def _has_nat(table: dict[str, Any]) -> bool:
    route = _default_route(table)
    return any(
        route.get(key)
        for key in ("NatGatewayId", "TransitGatewayId", "InstanceId", "NetworkInterfaceId")
    )


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
    """The schema custom resource answers CloudFormation with a PUT to a pre-signed S3 URL."""
    check = "S3 route for the custom resource"
    s3_gateways = [
        e for e in net.endpoints if e.get("VpcEndpointType") == "Gateway" and service_of(e) == "s3"
    ]
    tables_with_s3 = {t for e in s3_gateways for t in e.get("RouteTableIds", [])}
    subnet_tables = {sid: t.get("RouteTableId", "") for sid, t in net.route_table_of.items()}
    needed = sorted(set(subnet_tables.values()))
    if not opts.create_vpc_endpoints:
        return _s3_through_nat(net, needed)
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


def _s3_through_nat(net: Network, needed: list[str]) -> list[Finding]:
    check = "S3 route for the custom resource"
    no_nat = [sid for sid, t in net.route_table_of.items() if not _has_nat(t)]
    if no_nat:
        return [
            Finding(
                FAIL,
                check,
                f"CreateVpcEndpoints=false but {', '.join(no_nat)} have no NAT: neither the "
                "custom resource nor the functions reach AWS",
                f"set CreateVpcEndpoints=true PrivateRouteTableIds={','.join(needed)}",
            )
        ]
    return [Finding(OK, check, "every subnet has a NAT route")]


def _s3_through_existing_gateway(tables_with_s3: set[str], needed: list[str]) -> list[Finding]:
    check = "S3 route for the custom resource"
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
