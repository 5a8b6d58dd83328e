"""``VpcId`` empty: the stack builds its own network (a dual-stack VPC, private subnets in two AZs,
an S3 gateway endpoint, an egress-only internet gateway). There is nothing of it to read yet;
what can fail is the region having no room for one more VPC or egress-only gateway, and
settings that describe an existing VPC (the template's Rules refuse them, preflight says so
first)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import botocore

from webhook_inbox_tools.cli.preflight.common import (
    FAIL,
    OK,
    WARN,
    Clients,
    Finding,
    Options,
    could_not_check,
)

CHECK = "network"
# Zone IDs (the same physical zone in every account, unlike zone names) where the own network's
# subnets cannot serve the stack: Lambda does not attach functions to subnets in us-east-1's
# use1-az3, and the template's first two zones may be it.
UNSUPPORTED_ZONE_IDS = {"use1-az3": "Lambda cannot attach functions to its subnets"}
# (what, Service Quotas code of the VPC service, AWS's default quota)
QUOTAS = (
    ("VPCs", "L-F678F1CE", 5),
    ("egress-only internet gateways", "L-45FE3B85", 5),
)


def check_own_network(aws: Clients, opts: Options) -> list[Finding]:
    stray = [
        name
        for name, value in (
            ("SubnetIds", opts.subnet_ids),
            ("PrivateRouteTableIds", opts.route_table_ids),
            ("ExistingVpcEndpoints", opts.existing_vpc_endpoints),
            ("SecurityGroupId", opts.security_group_id),
        )
        if value
    ]
    if stray:
        return [
            Finding(
                FAIL,
                CHECK,
                f"{', '.join(stray)} describe an existing VPC, but VpcId is empty: the template's "
                "Rules refuse the deploy",
                "set VpcId too, or leave them empty and let the stack build its own network",
            )
        ]
    if opts.database_secret_arn:
        return [
            Finding(
                FAIL,
                CHECK,
                "DatabaseSecretArn (an existing database) but no VpcId: the stack's own network "
                "reaches only the AWS APIs and what the stack creates (the template's Rules refuse "
                "the deploy)",
                "set VpcId and SubnetIds to the network that reaches the database",
            )
        ]
    try:
        used = {
            "VPCs": len(aws.ec2.describe_vpcs()["Vpcs"]),
            "egress-only internet gateways": len(
                aws.ec2.describe_egress_only_internet_gateways()["EgressOnlyInternetGateways"]
            ),
        }
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [
            could_not_check(
                CHECK,
                exc,
                "ec2:DescribeVpcs, DescribeEgressOnlyInternetGateways",
                aws.region,
            )
        ]
    findings = check_zones(aws, opts) + check_dual_stack_region(aws.region, opts)
    for what, code, default in QUOTAS:
        quota, known = _quota(aws, code, default)
        if known and used[what] >= quota:
            findings.append(
                Finding(
                    FAIL,
                    CHECK,
                    f"{used[what]} {what} in {aws.region}, the quota is {quota}: the stack's own "
                    "network needs one more",
                    f"delete an unused one, request more (Service Quotas, VPC {code}), or deploy "
                    "into an existing VPC (VpcId, SubnetIds)",
                )
            )
        elif not known:
            findings.append(
                Finding(
                    WARN,
                    CHECK,
                    f"{used[what]} {what} in {aws.region}; the quota could not be read (AWS's "
                    f"default is {default}: at {default} the stack's own network cannot be made)",
                    "run preflight with a role allowed servicequotas:GetServiceQuota",
                )
            )
    if any(f.status != OK for f in findings):
        return findings
    return [
        *findings,
        Finding(
            OK,
            CHECK,
            "no VpcId: the stack builds its own (a dual-stack VPC, private subnets in two AZs, an "
            "S3 gateway endpoint, an egress-only internet gateway); the region has room for it",
        ),
    ]


def _quota(aws: Clients, code: str, default: int) -> tuple[int, bool]:
    """The region's quota, and whether it was read (else AWS's default)."""
    try:
        found = aws.servicequotas.get_service_quota(ServiceCode="vpc", QuotaCode=code)
    except Exception:  # noqa: BLE001 - unreadable: AWS's default, said so in the finding
        return default, False
    return int(found["Quota"]["Value"]), True


def check_zones(aws: Clients, opts: Options) -> list[Finding]:
    """The two zones the subnets go to (NewVpcZones, else the region's first two by name, as
    the template's ``Fn::GetAZs`` picks them), by Zone ID: refused where the stack cannot run,
    with two zones of the region that can."""
    try:
        listed = aws.ec2.describe_availability_zones(
            Filters=[
                {"Name": "zone-type", "Values": ["availability-zone"]},
                {"Name": "state", "Values": ["available"]},
            ]
        )["AvailabilityZones"]
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [could_not_check(CHECK, exc, "ec2:DescribeAvailabilityZones", aws.region)]
    zone_ids = {str(z["ZoneName"]): str(z["ZoneId"]) for z in listed}
    names = sorted(zone_ids)
    chosen = opts.new_vpc_zones or names[:2]
    usable = [n for n in names if zone_ids[n] not in UNSUPPORTED_ZONE_IDS]
    fix = (
        f"set NewVpcZones={','.join(usable[:2])}"
        if len(usable) >= 2
        else ("deploy into an existing VPC (VpcId, SubnetIds) in zones the stack supports")
    )
    problems = []
    for name in chosen:
        if name not in zone_ids:
            problems.append(f"{name} is not an available zone of {aws.region}")
        elif zone_ids[name] in UNSUPPORTED_ZONE_IDS:
            why = UNSUPPORTED_ZONE_IDS[zone_ids[name]]
            problems.append(f"{name} is zone {zone_ids[name]}, where {why}")
    if len(chosen) != 2:
        problems.append(f"NewVpcZones names {len(chosen)} zones; the own network takes two")
    if problems:
        return [Finding(FAIL, CHECK, "; ".join(problems), fix)]
    ids = ", ".join(f"{n} ({zone_ids[n]})" for n in chosen)
    return [Finding(OK, CHECK, f"the own network's subnets go to {ids}")]


def in_vpc_services(opts: Options) -> list[str]:
    """What the functions call from the own network (over IPv6, on dual-stack names)."""
    outbox = "events" if opts.outbox_destination == "eventbridge" else "sns"
    return ["sqs", "secretsmanager", outbox]


def check_dual_stack_region(region: str, opts: Options) -> list[Finding]:
    """The own network reaches AWS only over IPv6: every service the functions call needs a
    dual-stack endpoint in the region (botocore's endpoint data, the SDK the functions run)."""
    missing = [s for s in in_vpc_services(opts) if not has_dual_stack_endpoint(s, region)]
    if not missing:
        return []
    return [
        Finding(
            FAIL,
            CHECK,
            f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no dual-stack "
            f"endpoint in {region}: the own network, which reaches AWS over IPv6 only, cannot "
            "call them",
            "deploy into an existing VPC (VpcId, SubnetIds) with interface endpoints "
            "(CreateVpcEndpoints) or a NAT gateway",
        )
    ]


@cache
def _aws_partition() -> dict[str, Any]:
    path = Path(botocore.__file__).parent / "data" / "endpoints.json"
    partitions = json.loads(path.read_text())["partitions"]
    found: dict[str, Any] = next(p for p in partitions if p["partition"] == "aws")
    return found


def has_dual_stack_endpoint(service: str, region: str) -> bool:
    """Whether botocore declares a dual-stack variant of ``service`` in ``region`` (regions of
    other partitions are not judged here: True)."""
    partition = _aws_partition()
    if region not in partition["regions"]:
        return True
    spec = partition["services"].get(service, {}).get("endpoints", {}).get(region)
    if spec is None:
        return False
    return any(v.get("tags") == ["dualstack"] for v in spec.get("variants", []))
