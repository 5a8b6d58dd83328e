"""The deploy's settings from samconfig.toml, ``--parameter-overrides`` and the flags."""

from __future__ import annotations

import argparse
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from webhook_inbox_tools.cli.preflight.common import ENDPOINTS, Options

# One Key=Value of a parameter_overrides string, the grammar samcli reads and `sam deploy
# --guided` writes (Key="value" with the value's double quotes escaped, as JSON needs).
OVERRIDE = re.compile(r"""(\w+)=("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|(?:\\.|[^\s"'\\])+)""")

# template parameter -> Options field, for samconfig.toml's parameter_overrides
PARAMETERS = {
    "VpcId": "vpc_id",
    "SecurityGroupId": "security_group_id",
    "SubnetIds": "subnet_ids",
    "NewVpcZones": "new_vpc_zones",
    "PrivateRouteTableIds": "route_table_ids",
    "CreateVpcEndpoints": "create_vpc_endpoints",
    "CreateDatabaseProxy": "create_database_proxy",
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


# --- command line --------------------------------------------------------------------------


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _coerce(name: str, value: str) -> Any:
    if name in {"subnet_ids", "route_table_ids", "existing_vpc_endpoints", "new_vpc_zones"}:
        return _csv(value)
    if name in {"create_vpc_endpoints", "create_database_proxy"}:
        return value.strip().lower() == "true"
    if name in {"processor_max_concurrency", "ingest_reserved_concurrency"}:
        return int(value)
    if name == "endpoint" and value not in ENDPOINTS:
        raise ValueError(f"Endpoint must be one of {', '.join(ENDPOINTS)}, not {value!r}")
    return value


def options_from_config(path: Path, env: str = "default") -> dict[str, Any]:
    """Settings from samconfig.toml's ``env`` (``sam deploy --config-env``): stack name, region
    and the parameter overrides."""
    config = tomllib.loads(path.read_text())[env]
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
    parser.add_argument(
        "--config-env",
        default="default",
        help="its environment, as sam deploy --config-env (default 'default')",
    )
    parser.add_argument("--region", help="AWS region (default: the config's, else your profile's)")
    parser.add_argument(
        "--stack-name", help="the stack to deploy: checks the name is free or updatable"
    )
    parser.add_argument(
        "--vpc-id", help="VpcId: an existing VPC (empty: the stack builds its own network)"
    )
    parser.add_argument("--security-group-id", help="SecurityGroupId (the functions' own)")
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
        "--create-database-proxy", choices=["true", "false"], help="CreateDatabaseProxy"
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
    parser.add_argument(
        "--new-vpc-zones", help="the own network's two zones, comma-separated (NewVpcZones)"
    )
    parser.add_argument("--ingest-reserved-concurrency", help="with --endpoint FunctionUrl")
    parser.add_argument(
        "--parameter-overrides",
        help="as for sam deploy: 'Endpoint=FunctionUrl IngestReservedConcurrency=50 …' "
        "(over --config; the flags above win)",
    )


def options_from_args(args: argparse.Namespace) -> Options:
    values: dict[str, Any] = (
        options_from_config(args.config, args.config_env) if args.config else {}
    )
    if args.parameter_overrides:
        values.update(options_from_overrides(args.parameter_overrides))
    for item in fields(Options):
        given = getattr(args, item.name, None)
        if given is not None:
            values[item.name] = _coerce(item.name, given)
    return Options(**values)
