"""``VpcId`` empty: the stack builds its own network (a dual-stack VPC, private subnets in two AZs,
an S3 gateway endpoint, an egress-only internet gateway). There is nothing of it to read yet;
what can fail is the region having no room for one more VPC or egress-only gateway, and
settings that describe an existing VPC (the template's Rules refuse them, preflight says so
first)."""

from __future__ import annotations

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
    findings = []
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
    return findings or [
        Finding(
            OK,
            CHECK,
            "no VpcId: the stack builds its own (a dual-stack VPC, private subnets in two AZs, an "
            "S3 gateway endpoint, an egress-only internet gateway); the region has room for it",
        )
    ]


def _quota(aws: Clients, code: str, default: int) -> tuple[int, bool]:
    """The region's quota, and whether it was read (else AWS's default)."""
    try:
        found = aws.servicequotas.get_service_quota(ServiceCode="vpc", QuotaCode=code)
    except Exception:  # noqa: BLE001 - unreadable: AWS's default, said so in the finding
        return default, False
    return int(found["Quota"]["Value"]), True
