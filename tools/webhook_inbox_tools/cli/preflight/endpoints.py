"""How the functions reach the AWS APIs they call: the interface endpoints the stack creates or
reuses (in the VPC, or in a shared-services VPC behind a Route 53 private zone), a way out of
the VPC, or IPv6 to the services' dual-stack endpoints; and the DNS all of these need."""

from __future__ import annotations

from webhook_inbox_tools.cli.preflight.common import FAIL, OK, WARN, Finding, Options
from webhook_inbox_tools.cli.preflight.network import (
    VPC_DNS_ATTRIBUTES,
    Network,
    ipv4_egress,
    ipv6_egress,
    service_of,
)
from webhook_inbox_tools.cli.preflight.zones import PrivateNames, service_host

CHECK = "VPC endpoints"
ENDPOINT_SERVICES = ("sqs", "secretsmanager", "events", "sns", "s3")
# Services the functions call that answer on IPv6 too (their dual-stack endpoints, which the
# SDK uses with AWS_USE_DUALSTACK_ENDPOINT): reachable through an egress-only internet gateway.
DUAL_STACK_SERVICES = frozenset({"sqs", "secretsmanager", "events", "sns"})
GONE = frozenset({"disassociating", "disassociated", "failing", "failed"})  # IPv6 block states


def check_interface_endpoints(
    opts: Options, net: Network, names: PrivateNames, region: str
) -> list[Finding]:
    declared = [s for s in opts.existing_vpc_endpoints if s]
    unknown = [s for s in declared if s not in ENDPOINT_SERVICES]
    findings = []
    if unknown:
        findings.append(
            Finding(
                FAIL,
                CHECK,
                f"ExistingVpcEndpoints has unknown names: {', '.join(unknown)}",
                f"use only {', '.join(ENDPOINT_SERVICES)}",
            )
        )
    if not opts.create_vpc_endpoints:
        return findings + _reached_without_endpoints(opts, net, names, region)
    needed = interface_services(opts)
    in_vpc = _private_dns_endpoints(net)
    created = [s for s in needed if s not in declared]
    findings += _collisions(created, declared, in_vpc, names, region)
    reused = [s for s in needed if s in declared]
    served = []
    for service in reused:
        finding, how = _reused(service, in_vpc, names, region, _private_dns_off(net).get(service))
        if finding:
            findings.append(finding)
        served.append(f"{service} ({how})" if how else service)
    if not [f for f in findings if f.status == FAIL]:
        findings.append(
            Finding(
                OK,
                CHECK,
                f"creates {', '.join(created) or 'none'}; reuses {', '.join(served) or 'none'}",
            )
        )
    return findings


def _private_dns_endpoints(net: Network) -> dict[str, dict[str, object]]:
    return {
        service_of(e): e
        for e in net.endpoints
        if e.get("VpcEndpointType") == "Interface" and e.get("PrivateDnsEnabled")
    }


def _collisions(
    created: list[str],
    declared: list[str],
    in_vpc: dict[str, dict[str, object]],
    names: PrivateNames,
    region: str,
) -> list[Finding]:
    """A private-DNS endpoint, or a private zone named for the service, already owns the name
    an endpoint the stack creates would take: creating it fails with "conflicting DNS domain"."""
    owners = {}
    for service in created:
        host = service_host(service, region)
        zone = names.serving(host)
        if service in in_vpc:
            owners[service] = f"endpoint {in_vpc[service]['VpcEndpointId']}"
        elif zone and zone[0] == host:
            owners[service] = zone[1]
    findings = []
    if owners:
        wanted = [s for s in ENDPOINT_SERVICES if s in declared or s in owners]
        findings.append(
            Finding(
                FAIL,
                CHECK,
                "the VPC already resolves "
                + ", ".join(f"{s} privately ({owner})" for s, owner in owners.items())
                + ': creating another endpoint fails with "conflicting DNS domain"',
                f"set ExistingVpcEndpoints={','.join(wanted)} (and let those endpoints' security "
                "groups accept HTTPS from the functions)",
            )
        )
    for service in created:
        zone = names.serving(service_host(service, region))
        if service not in owners and zone:
            findings.append(
                Finding(
                    WARN,
                    CHECK,
                    f"{zone[1]} ({zone[0]}) answers for {service_host(service, region)}: the "
                    f"{service} endpoint the stack creates may conflict with it, or be shadowed",
                    f"if the zone points {service} at an endpoint, list {service} in "
                    "ExistingVpcEndpoints",
                )
            )
    return findings


def _private_dns_off(net: Network) -> dict[str, str]:
    """Interface endpoints the SDK's names do not reach: service -> endpoint id."""
    return {
        service_of(e): str(e["VpcEndpointId"])
        for e in net.endpoints
        if e.get("VpcEndpointType") == "Interface" and not e.get("PrivateDnsEnabled")
    }


def _reused(
    service: str,
    in_vpc: dict[str, dict[str, object]],
    names: PrivateNames,
    region: str,
    dark: str | None,
) -> tuple[Finding | None, str]:
    """Where a service listed in ExistingVpcEndpoints is served: an endpoint of this VPC, or a
    shared-services endpoint that a private zone associated with the VPC points at."""
    if service in in_vpc:
        return None, ""
    host = service_host(service, region)
    zone = names.serving(host)
    if zone:
        return None, f"through {zone[1]}, {zone[0]}: a shared-services endpoint"
    if not names.readable:
        return (
            Finding(
                WARN,
                CHECK,
                f"ExistingVpcEndpoints lists {service}: the VPC has no such endpoint, and whether "
                f"a private zone points {host} at a shared one could not be read",
                "run preflight with a role allowed route53:ListHostedZonesByVPC",
            ),
            "not confirmed",
        )
    if dark:
        return (
            Finding(
                FAIL,
                CHECK,
                f"ExistingVpcEndpoints lists {service}, but its endpoint {dark} has private DNS "
                f"off: the functions call {host}, which does not lead to it",
                f"aws ec2 modify-vpc-endpoint --vpc-endpoint-id {dark} --private-dns-enabled",
            ),
            "",
        )
    return (
        Finding(
            FAIL,
            CHECK,
            f"ExistingVpcEndpoints lists {service}, but the VPC has no such endpoint and no "
            f"private zone for {host} (a shared-services endpoint)",
            f"remove {service} from ExistingVpcEndpoints, or associate the shared-services "
            f"zone for {host} with the VPC",
        ),
        "",
    )


def _reached_without_endpoints(
    opts: Options, net: Network, names: PrivateNames, region: str
) -> list[Finding]:
    """CreateVpcEndpoints=false: every service the functions call must be reachable from every
    subnet, through an endpoint or private zone the VPC has, a way out, or IPv6."""
    in_vpc = _private_dns_endpoints(net)
    routes: list[str] = []
    stranded: dict[tuple[str, ...], list[str]] = {}  # subnets -> the services they cannot reach
    for service in interface_services(opts):
        zone = names.serving(service_host(service, region))
        if service in in_vpc:
            routes.append(f"{service} through {in_vpc[service]['VpcEndpointId']}")
        elif zone:
            routes.append(f"{service} through {zone[1]}")
        else:
            ways = {sid: _way_out(opts, net, sid, service) for sid in net.route_table_of}
            lost = tuple(sorted(sid for sid, way in ways.items() if not way))
            if lost:
                stranded.setdefault(lost, []).append(service)
            else:
                routes.append(f"{service} through {' and '.join(sorted(set(ways.values())))}")
    if stranded:
        return [
            Finding(
                FAIL,
                CHECK,
                "CreateVpcEndpoints=false, but "
                + "; ".join(
                    f"{', '.join(lost)} reach no {', '.join(services)}"
                    for lost, services in stranded.items()
                )
                + " (no endpoint, private zone, NAT, transit gateway, Cloud WAN, virtual private "
                "gateway or Gateway Load Balancer endpoint)",
                "set CreateVpcEndpoints=true (with PrivateRouteTableIds), or route the subnets "
                "to a NAT",
            )
        ]
    return [Finding(OK, CHECK, "none created; " + "; ".join(routes))]


def _way_out(opts: Options, net: Network, subnet_id: str, service: str) -> str:
    """How traffic from the subnet leaves the VPC for the service, '' when it cannot."""
    table = net.route_table_of[subnet_id]
    if ipv4_egress(table):
        return ipv4_egress(table)
    subnet = next(s for s in net.subnets if s["SubnetId"] == subnet_id)
    dual_stack = any(
        a.get("Ipv6CidrBlock") and a.get("Ipv6CidrBlockState", {}).get("State") not in GONE
        for a in subnet.get("Ipv6CidrBlockAssociationSet", [])
    )
    gateway = ipv6_egress(table)
    if opts.functions_use_dual_stack and service in DUAL_STACK_SERVICES and dual_stack and gateway:
        return f"IPv6 (egress-only internet gateway {gateway})"
    return ""


def interface_services(opts: Options) -> list[str]:
    """The services the functions call through interface endpoints (private DNS on)."""
    outbox = "sns" if opts.outbox_destination == "sns" else "events"
    return ["sqs", "secretsmanager", outbox]


def _interface_endpoints_created(opts: Options) -> list[str]:
    """The interface endpoints the stack would create for these settings."""
    if not opts.create_vpc_endpoints:
        return []
    return [s for s in interface_services(opts) if s not in opts.existing_vpc_endpoints]


def check_vpc_dns(opts: Options, net: Network) -> list[Finding]:
    check = "VPC DNS"
    created = _interface_endpoints_created(opts)
    if not created:
        return [Finding(OK, check, "the stack creates no interface endpoint: not needed")]
    off = [attribute for attribute in VPC_DNS_ATTRIBUTES if not net.dns.get(attribute)]
    if off:
        return [
            Finding(
                FAIL,
                check,
                f"{', '.join(off)} off in {opts.vpc_id}: the {', '.join(created)} endpoints "
                "(private DNS) would fail to create",
                " and ".join(
                    f"aws ec2 modify-vpc-attribute --vpc-id {opts.vpc_id} "
                    f"{VPC_DNS_ATTRIBUTES[attribute]}"
                    for attribute in off
                ),
            )
        ]
    return [Finding(OK, check, "DNS support and DNS hostnames on, as private DNS needs")]
