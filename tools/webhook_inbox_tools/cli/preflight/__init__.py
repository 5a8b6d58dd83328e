"""``webhook-inbox preflight``: read the account before ``sam deploy`` and list what would fail.

Describe/get calls only (IAM needs in docs/deploy.md, a test pairs them with the calls); nothing
is created or changed. Each check returns findings, ``ok``, ``warn`` (the deploy works, but
look) or ``fail`` (the deploy or the running stack would fail), and every finding that is not
``ok`` says how to fix it. Exit 0 when nothing fails, 1 otherwise, 2 for a usage error (no
region included). Secret values are read only to check their shape and are never printed.

The checks live in one module per family: account (stack, Lambda concurrency), network (subnets,
routes, ways out), zones (Route 53 private zones and Profiles), endpoints (how the functions
reach each service, VPC DNS), access (existing endpoints' security groups and policies), secrets
(ProvidersConfig too), organization (SCPs against a public Function URL), permissions (the
caller against the deploy policy, through IAM's policy simulator); settings reads the
deploy's parameters, common holds what they share (and how a failed call is reported).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Iterable

from webhook_inbox_tools.cli.preflight.access import check_existing_endpoint_access
from webhook_inbox_tools.cli.preflight.account import check_concurrency, check_stack
from webhook_inbox_tools.cli.preflight.common import (
    FAIL,
    NO_CREDENTIALS,
    OK,
    WARN,
    Clients,
    Finding,
    Options,
    could_not_check,
)
from webhook_inbox_tools.cli.preflight.endpoints import check_interface_endpoints, check_vpc_dns
from webhook_inbox_tools.cli.preflight.network import (
    check_s3_route,
    check_subnets,
    read_network,
)
from webhook_inbox_tools.cli.preflight.organization import check_function_url_policy
from webhook_inbox_tools.cli.preflight.own_network import check_own_network
from webhook_inbox_tools.cli.preflight.permissions import check_deploy_permissions
from webhook_inbox_tools.cli.preflight.secrets import (
    check_database_secret,
    check_provider_secrets,
    check_providers_config,
)
from webhook_inbox_tools.cli.preflight.settings import (
    add_arguments,
    options_from_args,
    options_from_config,
    options_from_overrides,
)
from webhook_inbox_tools.cli.preflight.zones import read_private_names

__all__ = [
    "FAIL",
    "OK",
    "WARN",
    "Clients",
    "Finding",
    "Options",
    "add_arguments",
    "check_concurrency",
    "check_deploy_permissions",
    "check_stack",
    "cmd_preflight",
    "options_from_config",
    "options_from_overrides",
    "render",
    "run",
]

# --- running -------------------------------------------------------------------------------


def run(aws: Clients, opts: Options) -> list[Finding]:
    findings = check_stack(aws, opts)
    if any(f.check == NO_CREDENTIALS for f in findings):
        return findings  # every other call would fail the same way
    findings += check_deploy_permissions(aws, opts)
    findings += check_network(aws, opts)
    findings += check_providers_config(opts)
    findings += check_database_secret(aws, opts)
    findings += check_provider_secrets(aws, opts)
    findings += check_concurrency(aws, opts)
    findings += check_function_url_policy(aws, opts)
    return findings


def check_network(aws: Clients, opts: Options) -> list[Finding]:
    if not opts.vpc_id:
        return check_own_network(aws, opts)
    if not opts.subnet_ids:
        return [
            Finding(
                FAIL,
                "network",
                f"VpcId={opts.vpc_id} without SubnetIds",
                "pass --subnet-ids (private subnets of that VPC in two AZs), or no --vpc-id "
                "(the stack builds its own network)",
            )
        ]
    try:
        net = read_network(aws, opts)
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [
            could_not_check(
                "network",
                exc,
                "ec2:DescribeSubnets, DescribeRouteTables, DescribeVpcEndpoints, "
                "DescribeVpcAttribute",
                aws.region,
            )
        ]
    names = read_private_names(aws, opts)
    return [
        *check_subnets(opts, net),
        *check_s3_route(opts, net),
        *names.findings,
        *check_interface_endpoints(opts, net, names, aws.region),
        *check_existing_endpoint_access(aws, opts, net),
        *check_vpc_dns(opts, net),
    ]


def render(findings: Iterable[Finding]) -> str:
    lines = []
    for f in findings:
        lines.append(f"[{f.status:>4}] {f.check}: {f.detail}")
        if f.fix:
            lines.append(f"       fix: {f.fix}")
    failed = sum(f.status == FAIL for f in findings)
    lines.append(
        f"{failed} problem(s): fix them before `sam deploy`"
        if failed
        else "ready: `sam deploy` should succeed with these settings"
    )
    return "\n".join(lines)


def cmd_preflight(args: argparse.Namespace) -> int:
    try:
        opts = options_from_args(args)
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(f"error: cannot read the settings: {exc}", file=sys.stderr)
        return 2
    from botocore.exceptions import NoRegionError

    try:
        clients = Clients(opts.region)
    except NoRegionError:
        print(
            "error: no AWS region: pass --region, set it in samconfig.toml (region = ...) or "
            "AWS_REGION, or configure your profile's",
            file=sys.stderr,
        )
        return 2
    findings = run(clients, opts)
    print(render(findings))
    return 1 if any(f.status == FAIL for f in findings) else 0
