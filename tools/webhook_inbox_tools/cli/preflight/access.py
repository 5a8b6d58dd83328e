"""Whether the endpoints already in the VPC let the functions through: a security group that
accepts HTTPS from them, and a policy that allows the calls they make.

Private DNS sends the functions to such an endpoint whether or not ``ExistingVpcEndpoints`` lists
it. Endpoints of a shared-services VPC (behind a private zone) are not visible from here.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from ipaddress import IPv4Network, ip_network
from typing import Any

from webhook_inbox_tools.cli.preflight.common import (
    FAIL,
    OK,
    WARN,
    Clients,
    Finding,
    Options,
    could_not_check,
)
from webhook_inbox_tools.cli.preflight.endpoints import interface_services
from webhook_inbox_tools.cli.preflight.network import Network, service_of

CHECK = "existing endpoints' access"
# What the functions call on each service (the runtime's aws module and the outbox).
CALLS = {
    "sqs": ("sqs:SendMessage",),
    "secretsmanager": ("secretsmanager:GetSecretValue",),
    "events": ("events:PutEvents",),
    "sns": ("sns:Publish",),
}


def check_existing_endpoint_access(aws: Clients, opts: Options, net: Network) -> list[Finding]:
    used = [
        e
        for e in net.endpoints
        if e.get("VpcEndpointType") == "Interface"
        and e.get("PrivateDnsEnabled")
        and service_of(e) in interface_services(opts)
    ]
    if not used:
        return []
    group_ids = sorted({g["GroupId"] for e in used for g in e.get("Groups", [])})
    try:
        described = aws.ec2.describe_security_groups(GroupIds=group_ids) if group_ids else {}
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [could_not_check(CHECK, exc, "ec2:DescribeSecurityGroups", aws.region)]
    groups = {g["GroupId"]: g for g in described.get("SecurityGroups", [])}
    subnets = [IPv4Network(s["CidrBlock"]) for s in net.subnets]
    findings = []
    for endpoint in used:
        findings += _group_findings(endpoint, groups, subnets, opts.security_group_id)
        findings += _policy_findings(endpoint)
    if not findings:
        names = ", ".join(f"{service_of(e)} ({e['VpcEndpointId']})" for e in used)
        findings.append(
            Finding(OK, CHECK, f"{names}: HTTPS from the subnets accepted; policy allows the calls")
        )
    return findings


def _admits_https(permission: dict[str, Any]) -> bool:
    if permission.get("IpProtocol") == "-1":
        return True
    return permission.get("IpProtocol") == "tcp" and (
        int(permission.get("FromPort", -1)) <= 443 <= int(permission.get("ToPort", -1))
    )


def _group_findings(
    endpoint: dict[str, Any],
    groups: dict[str, dict[str, Any]],
    subnets: list[IPv4Network],
    functions_group: str,
) -> list[Finding]:
    """``ok`` when a rule accepts HTTPS from every subnet (or from SecurityGroupId); a warning
    when only other security groups or prefix lists are accepted; a failure when nothing is."""
    name = f"{service_of(endpoint)} endpoint {endpoint['VpcEndpointId']}"
    ids = [g["GroupId"] for g in endpoint.get("Groups", [])]
    if not ids:  # AWS always gives an interface endpoint one; an emulator may not
        return [
            Finding(
                WARN,
                CHECK,
                f"{name} lists no security group: not checked",
                "make sure it accepts HTTPS from the functions' subnets",
            )
        ]
    rules = [p for gid in ids for p in groups.get(gid, {}).get("IpPermissions", [])]
    https = [p for p in rules if _admits_https(p)]
    cidrs = [ip_network(r["CidrIp"]) for p in https for r in p.get("IpRanges", [])]
    if all(any(s.subnet_of(c) for c in cidrs if c.version == 4) for s in subnets):
        return []
    sources = [g["GroupId"] for p in https for g in p.get("UserIdGroupPairs", [])]
    if functions_group and functions_group in sources:
        return []
    others = sources + [pl["PrefixListId"] for p in https for pl in p.get("PrefixListIds", [])]
    allow = (
        f"allow TCP 443 from {', '.join(map(str, subnets))} (or from the functions' security "
        f"group) on {', '.join(ids)}"
    )
    if others:
        return [
            Finding(
                WARN,
                CHECK,
                f"{name} accepts HTTPS only from {', '.join(others)}: the functions must be in "
                "one of them",
                f"pass that group as SecurityGroupId, or {allow}",
            )
        ]
    return [
        Finding(
            FAIL,
            CHECK,
            f"{name}: its security groups accept no HTTPS from the functions' subnets; every "
            "call through it times out",
            allow,
        )
    ]


def _policy_findings(endpoint: dict[str, Any]) -> list[Finding]:
    service = service_of(endpoint)
    name = f"{service} endpoint {endpoint['VpcEndpointId']}"
    try:
        document = json.loads(endpoint.get("PolicyDocument") or "{}")
        statements = document.get("Statement", [])
        statements = [statements] if isinstance(statements, dict) else list(statements)
    except (ValueError, AttributeError):
        return [Finding(WARN, CHECK, f"{name}: its policy could not be parsed", "read it")]
    if not statements:  # no policy: the default, full access
        return []
    findings = []
    for action in CALLS.get(service, ()):
        verdict = _verdict(statements, action)
        if verdict == "denied":
            findings.append(
                Finding(
                    FAIL,
                    CHECK,
                    f"{name}: its policy does not allow {action}",
                    f"let the endpoint's policy allow {action} on the stack's resources",
                )
            )
        elif verdict == "limited":
            findings.append(
                Finding(
                    WARN,
                    CHECK,
                    f"{name}: its policy allows {action} only for some principals, resources "
                    "or conditions",
                    f"make sure it allows {action} for the stack's functions on its resources",
                )
            )
    return findings


def _matches(patterns: Any, action: str) -> bool:
    listed = [patterns] if isinstance(patterns, str) else list(patterns or [])
    return any(fnmatchcase(action.lower(), str(p).lower()) for p in listed)


def _verdict(statements: list[dict[str, Any]], action: str) -> str:
    """``allowed``, ``limited`` (allowed with a principal, resource or condition that may not
    cover the stack) or ``denied``."""
    allows = [
        s for s in statements if s.get("Effect") == "Allow" and _matches(s.get("Action"), action)
    ]
    denies = [
        s for s in statements if s.get("Effect") == "Deny" and _matches(s.get("Action"), action)
    ]
    if not allows or any(_unconditional(s) for s in denies):
        return "denied"
    if denies or not any(_unconditional(s) for s in allows):
        return "limited"
    return "allowed"


def _unconditional(statement: dict[str, Any]) -> bool:
    principal = statement.get("Principal")
    everyone = principal == "*" or (isinstance(principal, dict) and principal.get("AWS") == "*")
    resource = statement.get("Resource")
    anything = resource == "*" or (isinstance(resource, list) and "*" in resource)
    return everyone and anything and not statement.get("Condition")
