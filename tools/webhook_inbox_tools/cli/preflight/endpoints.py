"""The interface endpoints the stack creates or reuses, and the DNS they need."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from webhook_inbox_tools.cli.preflight.common import FAIL, OK, Finding, Options

if TYPE_CHECKING:
    from webhook_inbox_tools.cli.preflight.network import Network

ENDPOINT_SERVICES = ("sqs", "secretsmanager", "events", "sns", "s3")
# Both must be on for an interface endpoint with private DNS (the API creates VPCs without DNS
# hostnames; the console's wizard and the default VPC have them): attribute -> the option of
# `aws ec2 modify-vpc-attribute` that turns it on.
VPC_DNS_ATTRIBUTES = {
    "enableDnsSupport": "--enable-dns-support",
    "enableDnsHostnames": "--enable-dns-hostnames",
}


def service_of(endpoint: dict[str, Any]) -> str:
    return str(endpoint["ServiceName"]).rsplit(".", 1)[-1]


def check_interface_endpoints(opts: Options, net: Network) -> list[Finding]:
    check = "VPC endpoints"
    if not opts.create_vpc_endpoints:
        return [Finding(OK, check, "none created (CreateVpcEndpoints=false; the NAT is used)")]
    needed = _interface_services(opts)
    in_vpc = {service_of(e): e for e in net.endpoints if e.get("VpcEndpointType") == "Interface"}
    declared = [s for s in opts.existing_vpc_endpoints if s]
    unknown = [s for s in declared if s not in ENDPOINT_SERVICES]
    collide = [
        s for s in needed if s not in declared and in_vpc.get(s, {}).get("PrivateDnsEnabled")
    ]
    absent = [s for s in declared if s in needed and s not in in_vpc]
    findings = []
    if unknown:
        findings.append(
            Finding(
                FAIL,
                check,
                f"ExistingVpcEndpoints has unknown names: {', '.join(unknown)}",
                f"use only {', '.join(ENDPOINT_SERVICES)}",
            )
        )
    if collide:
        wanted = [s for s in ENDPOINT_SERVICES if s in declared or s in collide]
        findings.append(
            Finding(
                FAIL,
                check,
                "the VPC already has private-DNS endpoints for "
                + ", ".join(f"{s} ({in_vpc[s]['VpcEndpointId']})" for s in collide)
                + ': creating another fails with "conflicting DNS domain"',
                f"set ExistingVpcEndpoints={','.join(wanted)} (and let those endpoints' security "
                "groups accept HTTPS from the functions)",
            )
        )
    if absent:
        findings.append(
            Finding(
                FAIL,
                check,
                f"ExistingVpcEndpoints lists {', '.join(absent)}, but the VPC has no such endpoint",
                f"remove {', '.join(absent)} from ExistingVpcEndpoints",
            )
        )
    if not findings:
        created = [s for s in needed if s not in declared]
        reused = [s for s in needed if s in declared]
        findings.append(
            Finding(
                OK,
                check,
                f"creates {', '.join(created) or 'none'}; reuses {', '.join(reused) or 'none'}",
            )
        )
    return findings


def _interface_services(opts: Options) -> list[str]:
    """The services the functions call through interface endpoints (private DNS on)."""
    outbox = "sns" if opts.outbox_destination == "sns" else "events"
    return ["sqs", "secretsmanager", outbox]


def _interface_endpoints_created(opts: Options) -> list[str]:
    """The interface endpoints the stack would create for these settings."""
    if not opts.create_vpc_endpoints:
        return []
    return [s for s in _interface_services(opts) if s not in opts.existing_vpc_endpoints]


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
