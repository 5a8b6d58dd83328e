"""``webhook-inbox preflight``: read the account before ``sam deploy`` and list what would fail.

Describe/get calls only (IAM needs in docs/deploy.md, a test pairs them with the calls); nothing
is created or changed. Each check returns findings, ``ok``, ``warn`` (the deploy works, but
look) or ``fail`` (the deploy or the running stack would fail), and every finding that is not
``ok`` says how to fix it. Exit 0 when nothing fails, 1 otherwise, 2 for a usage error (no
region included). Secret values are read only to check their shape and are never printed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "ok", "warn", "FAIL"
# python3.13 Lambda: the stack's names are built from the stack name (alarms, bus, log groups).
STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
STACK_STATES_THAT_BLOCK = re.compile(r"(ROLLBACK_COMPLETE|_FAILED|_IN_PROGRESS)$")
STACK_STATES_THAT_BLOCK_EXCEPT = {"UPDATE_ROLLBACK_COMPLETE"}
# Processor instances plus the ingest bursts and the sweeper beside them.
CONCURRENCY_HEADROOM = 10
# Lambda refuses a reservation that would leave fewer unreserved concurrent executions.
UNRESERVED_MINIMUM = 100
ENDPOINTS = ("HttpApi", "FunctionUrl")
LAMBDA_CONCURRENCY_QUOTA = "L-B99A9384"
ENDPOINT_SERVICES = ("sqs", "secretsmanager", "events", "sns", "s3")
# Both must be on for an interface endpoint with private DNS (the API creates VPCs without DNS
# hostnames; the console's wizard and the default VPC have them): attribute -> the option of
# `aws ec2 modify-vpc-attribute` that turns it on.
VPC_DNS_ATTRIBUTES = {
    "enableDnsSupport": "--enable-dns-support",
    "enableDnsHostnames": "--enable-dns-hostnames",
}


@dataclass
class Options:
    """The deploy's settings, named after the template's parameters."""

    region: str = ""
    stack_name: str = "webhook-inbox"
    vpc_id: str = ""
    subnet_ids: list[str] = field(default_factory=list)
    route_table_ids: list[str] = field(default_factory=list)
    create_vpc_endpoints: bool = True
    existing_vpc_endpoints: list[str] = field(default_factory=list)
    outbox_destination: str = "eventbridge"
    database_secret_arn: str = ""
    database_secret_kms_key_arn: str = ""
    database_host: str = ""
    provider_secrets_prefix: str = "webhook-inbox/providers/"
    providers_config: str = '{"providers": {}}'
    processor_max_concurrency: int = 5
    endpoint: str = "HttpApi"
    ingest_reserved_concurrency: int = 20


# One Key=Value of a parameter_overrides string, the grammar samcli reads and `sam deploy
# --guided` writes (Key="value" with the value's double quotes escaped, as JSON needs).
OVERRIDE = re.compile(r"""(\w+)=("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|(?:\\.|[^\s"'\\])+)""")

# template parameter -> Options field, for samconfig.toml's parameter_overrides
PARAMETERS = {
    "VpcId": "vpc_id",
    "SubnetIds": "subnet_ids",
    "PrivateRouteTableIds": "route_table_ids",
    "CreateVpcEndpoints": "create_vpc_endpoints",
    "ExistingVpcEndpoints": "existing_vpc_endpoints",
    "OutboxDestination": "outbox_destination",
    "DatabaseSecretArn": "database_secret_arn",
    "DatabaseSecretKmsKeyArn": "database_secret_kms_key_arn",
    "DatabaseHost": "database_host",
    "ProviderSecretsPrefix": "provider_secrets_prefix",
    "ProvidersConfig": "providers_config",
    "ProcessorMaxConcurrency": "processor_max_concurrency",
    "Endpoint": "endpoint",
    "IngestReservedConcurrency": "ingest_reserved_concurrency",
}


@dataclass
class Finding:
    status: str
    check: str
    detail: str
    fix: str = ""


class Clients:
    """The AWS clients the checks read with (bounded timeouts: a CLI should not hang)."""

    def __init__(self, region: str, factory: Callable[[str], Any] | None = None) -> None:
        make = factory or _boto3_factory(region)
        self.ec2 = make("ec2")
        self.secretsmanager = make("secretsmanager")
        self.kms = make("kms")
        self.lambda_ = make("lambda")
        self.cloudformation = make("cloudformation")
        self.region: str = self.ec2.meta.region_name


def _boto3_factory(region: str) -> Callable[[str], Any]:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 3})
    session = boto3.session.Session(region_name=region or None)

    def make(service: str) -> Any:
        return session.client(service, config=config)  # type: ignore[call-overload]

    return make


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code") or type(exc).__name__)


# --- stack ---------------------------------------------------------------------------------


def check_stack(aws: Clients, opts: Options) -> list[Finding]:
    name = opts.stack_name
    if not STACK_NAME.match(name):
        return [
            Finding(
                FAIL,
                "stack name",
                f"{name!r} is not a valid stack name",
                "use letters, digits and hyphens, starting with a letter, at most 128 characters",
            )
        ]
    try:
        stacks = aws.cloudformation.describe_stacks(StackName=name)["Stacks"]
    except Exception as exc:  # noqa: BLE001 - ClientError: "does not exist" is the common case
        if "does not exist" in str(exc):
            return [Finding(OK, "stack name", f"{name}: valid; a new stack will be created")]
        return [_could_not_check("stack name", exc, "cloudformation:DescribeStacks")]
    status = stacks[0]["StackStatus"]
    if STACK_STATES_THAT_BLOCK.search(status) and status not in STACK_STATES_THAT_BLOCK_EXCEPT:
        fix = (
            "wait until it finishes, then run preflight again"
            if status.endswith("_IN_PROGRESS")
            else f"delete it first (aws cloudformation delete-stack --stack-name {name}), "
            "or deploy under another --stack-name"
        )
        return [Finding(FAIL, "stack name", f"stack {name} exists in state {status}", fix)]
    return [Finding(OK, "stack name", f"{name}: exists ({status}); the deploy updates it")]


# --- network -------------------------------------------------------------------------------


@dataclass
class Network:
    subnets: list[dict[str, Any]]
    route_table_of: dict[str, dict[str, Any]]  # subnet id -> its route table
    endpoints: list[dict[str, Any]]
    dns: dict[str, bool] = field(default_factory=dict)  # enableDnsSupport, enableDnsHostnames


def _service_of(endpoint: dict[str, Any]) -> str:
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
        e for e in net.endpoints if e.get("VpcEndpointType") == "Gateway" and _service_of(e) == "s3"
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


def check_interface_endpoints(opts: Options, net: Network) -> list[Finding]:
    check = "VPC endpoints"
    if not opts.create_vpc_endpoints:
        return [Finding(OK, check, "none created (CreateVpcEndpoints=false; the NAT is used)")]
    needed = _interface_services(opts)
    in_vpc = {_service_of(e): e for e in net.endpoints if e.get("VpcEndpointType") == "Interface"}
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


# --- secrets -------------------------------------------------------------------------------


def _customer_key(aws: Clients, key_id: str | None) -> str | None:
    """The key's ARN when it is a customer managed key; None for the AWS managed one."""
    if not key_id:
        return None
    metadata = aws.kms.describe_key(KeyId=key_id)["KeyMetadata"]
    return None if metadata.get("KeyManager") == "AWS" else str(metadata["Arn"])


def check_database_secret(aws: Clients, opts: Options) -> list[Finding]:
    check = "database secret"
    arn = opts.database_secret_arn
    if not arn:
        return [Finding(OK, check, "none given: the stack creates RDS PostgreSQL and RDS Proxy")]
    try:
        described = aws.secretsmanager.describe_secret(SecretId=arn)
        key = _customer_key(aws, described.get("KmsKeyId"))
        raw = aws.secretsmanager.get_secret_value(SecretId=arn).get("SecretString", "")
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [
            _could_not_check(
                check, exc, "secretsmanager:DescribeSecret, GetSecretValue, kms:DescribeKey"
            )
        ]
    findings = []
    try:
        secret = json.loads(raw)
    except ValueError:
        secret = None
    if not isinstance(secret, dict):
        return [Finding(FAIL, check, "the secret is not a JSON object", "store the RDS JSON shape")]
    missing = [k for k in ("username", "password") if not secret.get(k)]
    if not opts.database_host and not secret.get("host"):
        missing.append("host")
    if missing:
        managed = str(described.get("Name", "")).startswith("rds!")
        fix = (
            "set DatabaseHost (and DatabasePort, DatabaseName) to where the database listens"
            if missing == ["host"]
            else "store username, password, host, port and dbname in the secret"
        )
        findings.append(
            Finding(
                FAIL,
                check,
                f"lacks {', '.join(missing)}"
                + (" (an RDS-managed secret holds only username and password)" if managed else ""),
                fix,
            )
        )
    # Key ARNs, not secret material: a plain comparison is right here.
    allowed_key = opts.database_secret_kms_key_arn
    if key and key != allowed_key:
        findings.append(
            Finding(
                FAIL,
                check,
                f"encrypted with the customer managed key {key}: the functions get KMS access "
                "denied",
                f"set DatabaseSecretKmsKeyArn={key}",
            )
        )
    if not findings:
        findings.append(
            Finding(OK, check, "usable: JSON with username, password and a host; key allowed")
        )
    return findings


def _app_key_arn(aws: Clients, opts: Options) -> str | None:
    try:
        stack = aws.cloudformation.describe_stacks(StackName=opts.stack_name)["Stacks"][0]
    except Exception:  # noqa: BLE001 - no stack yet: no app key yet
        return None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return outputs.get("AppKeyArn")


def check_provider_secrets(aws: Clients, opts: Options) -> list[Finding]:
    check = "provider secrets"
    prefix = opts.provider_secrets_prefix
    try:
        listed = aws.secretsmanager.list_secrets(Filters=[{"Key": "name", "Values": [prefix]}])
        secrets = [s for s in listed["SecretList"] if str(s["Name"]).startswith(prefix)]
        app_key = _app_key_arn(aws, opts)
        unreadable = []
        for secret in secrets:
            key = _customer_key(aws, secret.get("KmsKeyId"))
            if key and key != app_key:
                unreadable.append(f"{secret['Name']} ({key})")
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [_could_not_check(check, exc, "secretsmanager:ListSecrets, kms:DescribeKey")]
    findings = []
    if unreadable:
        findings.append(
            Finding(
                FAIL,
                check,
                f"{', '.join(unreadable)}: encrypted with a key ingest may not use",
                "re-encrypt with the stack's key (output AppKeyArn) or aws/secretsmanager: "
                "aws secretsmanager update-secret --secret-id NAME --kms-key-id KEY",
            )
        )
    names = {str(s["ARN"]): s["Name"] for s in secrets}
    for arn in _configured_secret_arns(opts.providers_config):
        if arn not in names:
            findings.append(
                Finding(
                    FAIL,
                    check,
                    f"ProvidersConfig names {arn}, which is not a secret under {prefix!r}",
                    f"create it under {prefix} (ingest may read only those) or fix the ARN",
                )
            )
    if not findings:
        status = OK if secrets else WARN
        detail = (
            f"{len(secrets)} under {prefix!r}, all readable by ingest"
            if secrets
            else f"none under {prefix!r} yet: add them after the deploy (README: Add a provider)"
        )
        findings.append(Finding(status, check, detail))
    return findings


def _configured_secret_arns(providers_config: str) -> list[str]:
    try:
        providers = json.loads(providers_config or "{}").get("providers", {})
    except (ValueError, AttributeError):
        return []
    return [
        str(secret["secret_arn"])
        for provider in providers.values()
        for secret in provider.get("secrets", [])
        if isinstance(secret, dict) and "secret_arn" in secret
    ]


# --- quotas --------------------------------------------------------------------------------


def check_concurrency(aws: Clients, opts: Options) -> list[Finding]:
    """Enough unreserved concurrency for the processor beside ingest; with Endpoint=FunctionUrl,
    room for ingest's own reservation too (the throttle of its URL)."""
    check = "Lambda concurrency"
    try:
        limits = aws.lambda_.get_account_settings()["AccountLimit"]
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [_could_not_check(check, exc, "lambda:GetAccountSettings")]
    findings = []
    # A deployed stack's reservation is given back to the pool when the deploy changes it.
    held = _ingest_reservation(aws, opts)
    if held is None:
        findings.append(
            Finding(
                WARN,
                check,
                "could not read the deployed ingest function's reserved concurrency; counted 0",
                "run preflight with a role allowed cloudformation:DescribeStackResource, "
                "lambda:GetFunctionConcurrency",
            )
        )
    unreserved = int(limits["UnreservedConcurrentExecutions"]) + (held or 0)
    needed = opts.processor_max_concurrency + CONCURRENCY_HEADROOM
    if opts.endpoint != "FunctionUrl":
        if unreserved < needed:
            findings.append(
                Finding(
                    FAIL,
                    check,
                    f"{unreserved} unreserved concurrent executions; ProcessorMaxConcurrency="
                    f"{opts.processor_max_concurrency} plus ingest and the sweeper need {needed}",
                    f"request more (Service Quotas, Lambda {LAMBDA_CONCURRENCY_QUOTA}) or lower "
                    "ProcessorMaxConcurrency",
                )
            )
        else:
            findings.append(
                Finding(OK, check, f"{unreserved} unreserved concurrent executions (need {needed})")
            )
        return findings
    reserve = opts.ingest_reserved_concurrency
    left, floor = unreserved - reserve, max(UNRESERVED_MINIMUM, needed)
    if left < floor:
        most = unreserved - floor
        findings.append(
            Finding(
                FAIL,
                check,
                f"{unreserved} unreserved concurrent executions: reserving "
                f"IngestReservedConcurrency={reserve} for the Function URL leaves {left}, and "
                f"Lambda keeps at least {UNRESERVED_MINIMUM} unreserved (the processor and "
                f"sweeper need {needed} of them)",
                (f"lower IngestReservedConcurrency to {most} or less, " if most >= 1 else "")
                + f"request more (Service Quotas, Lambda {LAMBDA_CONCURRENCY_QUOTA}), "
                "or deploy with Endpoint=HttpApi (no reservation)",
            )
        )
    else:
        findings.append(
            Finding(
                OK,
                check,
                f"{unreserved} unreserved concurrent executions: {reserve} reserved for the "
                f"Function URL leaves {left} (need {floor})",
            )
        )
    return findings


def _ingest_reservation(aws: Clients, opts: Options) -> int | None:
    """The deployed stack's ingest reservation: 0 without a stack or a reservation, None when
    it cannot be read."""
    try:
        resource = aws.cloudformation.describe_stack_resource(
            StackName=opts.stack_name, LogicalResourceId="IngestFunction"
        )["StackResourceDetail"]
    except Exception as exc:  # noqa: BLE001 - ClientError: "does not exist" is the common case
        return 0 if "does not exist" in str(exc) else None
    try:
        found = aws.lambda_.get_function_concurrency(FunctionName=resource["PhysicalResourceId"])
    except Exception:  # noqa: BLE001 - any AWS error: unknown
        return None
    return int(found.get("ReservedConcurrentExecutions", 0))


# --- running -------------------------------------------------------------------------------


def _could_not_check(check: str, exc: Exception, actions: str) -> Finding:
    return Finding(
        FAIL,
        check,
        f"could not check: {_error_code(exc)}",
        f"run preflight with a role allowed {actions}",
    )


def run(aws: Clients, opts: Options) -> list[Finding]:
    findings = check_stack(aws, opts)
    if not opts.vpc_id or not opts.subnet_ids:
        findings.append(
            Finding(FAIL, "network", "no VPC or subnets given", "pass --vpc-id and --subnet-ids")
        )
    else:
        try:
            net = read_network(aws, opts)
        except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
            findings.append(
                _could_not_check(
                    "network",
                    exc,
                    "ec2:DescribeSubnets, DescribeRouteTables, DescribeVpcEndpoints, "
                    "DescribeVpcAttribute",
                )
            )
        else:
            findings += check_subnets(opts, net)
            findings += check_s3_route(opts, net)
            findings += check_interface_endpoints(opts, net)
            findings += check_vpc_dns(opts, net)
    findings += check_database_secret(aws, opts)
    findings += check_provider_secrets(aws, opts)
    findings += check_concurrency(aws, opts)
    return findings


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


# --- command line --------------------------------------------------------------------------


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _coerce(name: str, value: str) -> Any:
    if name in {"subnet_ids", "route_table_ids", "existing_vpc_endpoints"}:
        return _csv(value)
    if name == "create_vpc_endpoints":
        return value.strip().lower() == "true"
    if name in {"processor_max_concurrency", "ingest_reserved_concurrency"}:
        return int(value)
    if name == "endpoint" and value not in ENDPOINTS:
        raise ValueError(f"Endpoint must be one of {', '.join(ENDPOINTS)}, not {value!r}")
    return value


def options_from_config(path: Path) -> dict[str, Any]:
    """Settings from samconfig.toml: stack name, region and the parameter overrides."""
    config = tomllib.loads(path.read_text())["default"]
    deploy = config.get("deploy", {}).get("parameters", {})
    merged = {**config.get("global", {}).get("parameters", {}), **deploy}
    found: dict[str, Any] = {}
    if "stack_name" in merged:
        found["stack_name"] = merged["stack_name"]
    if "region" in merged:
        found["region"] = merged["region"]
    found.update(options_from_overrides(merged.get("parameter_overrides", [])))
    return found


def options_from_overrides(overrides: str | list[str]) -> dict[str, Any]:
    """Settings from parameter overrides, as samconfig.toml holds them (a list, or one string)
    or as ``sam deploy --parameter-overrides`` takes them (``Key=Value Key=Value``)."""
    if isinstance(overrides, str):
        pairs = [(m[1], m[2]) for m in OVERRIDE.finditer(overrides)]
    else:
        pairs = [(k, v) for k, _, v in (str(item).partition("=") for item in overrides)]
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in PARAMETERS:
            found[PARAMETERS[key]] = _coerce(PARAMETERS[key], _unquote(value.strip()))
    return found


def _unquote(value: str) -> str:
    """samcli's unquoting: wrapping quotes off, then escaped spaces and quotes unescaped."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value.replace("\\ ", " ").replace('\\"', '"').replace("\\'", "'")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="read settings from samconfig.toml")
    parser.add_argument("--region", help="AWS region (default: the config's, else your profile's)")
    parser.add_argument(
        "--stack-name", help="the stack to deploy: checks the name is free or updatable"
    )
    parser.add_argument("--vpc-id", help="the VPC the functions run in (VpcId)")
    parser.add_argument("--subnet-ids", help="comma-separated (SubnetIds)")
    parser.add_argument("--route-table-ids", help="comma-separated (PrivateRouteTableIds)")
    parser.add_argument(
        "--create-vpc-endpoints", choices=["true", "false"], help="CreateVpcEndpoints"
    )
    parser.add_argument("--existing-vpc-endpoints", help="comma-separated (ExistingVpcEndpoints)")
    parser.add_argument(
        "--outbox-destination", choices=["eventbridge", "sns"], help="OutboxDestination"
    )
    parser.add_argument(
        "--database-secret-arn", help="an existing database secret (DatabaseSecretArn)"
    )
    parser.add_argument(
        "--database-secret-kms-key-arn",
        help="the key that encrypts that secret (DatabaseSecretKmsKeyArn)",
    )
    parser.add_argument("--database-host", help="an existing database's host (DatabaseHost)")
    parser.add_argument(
        "--provider-secrets-prefix", help="where provider secrets live (ProviderSecretsPrefix)"
    )
    parser.add_argument("--providers-config", help="the ProvidersConfig JSON")
    parser.add_argument("--processor-max-concurrency", help="ProcessorMaxConcurrency")
    parser.add_argument("--endpoint", choices=ENDPOINTS, help="Endpoint (default HttpApi)")
    parser.add_argument("--ingest-reserved-concurrency", help="with --endpoint FunctionUrl")
    parser.add_argument(
        "--parameter-overrides",
        help="as for sam deploy: 'Endpoint=FunctionUrl IngestReservedConcurrency=50 …' "
        "(over --config; the flags above win)",
    )


def options_from_args(args: argparse.Namespace) -> Options:
    values: dict[str, Any] = options_from_config(args.config) if args.config else {}
    if args.parameter_overrides:
        values.update(options_from_overrides(args.parameter_overrides))
    for item in fields(Options):
        given = getattr(args, item.name, None)
        if given is not None:
            values[item.name] = _coerce(item.name, given)
    return Options(**values)


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
