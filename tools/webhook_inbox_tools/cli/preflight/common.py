"""What every check shares: the deploy's settings, a finding, the AWS clients, error wording."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OK, WARN, FAIL = "ok", "warn", "FAIL"
ENDPOINTS = ("HttpApi", "FunctionUrl")


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


def error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code") or type(exc).__name__)


def could_not_check(check: str, exc: Exception, actions: str) -> Finding:
    return Finding(
        FAIL,
        check,
        f"could not check: {error_code(exc)}",
        f"run preflight with a role allowed {actions}",
    )
