"""What every check shares: the deploy's settings, a finding, the AWS clients, error wording."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

OK, WARN, FAIL = "ok", "warn", "FAIL"
ENDPOINTS = ("HttpApi", "FunctionUrl")


@dataclass
class Options:
    """The deploy's settings, named after the template's parameters."""

    region: str = ""
    stack_name: str = "webhook-inbox"
    vpc_id: str = ""
    security_group_id: str = ""
    subnet_ids: list[str] = field(default_factory=list)
    new_vpc_zones: list[str] = field(default_factory=list)  # the own network's two zones
    route_table_ids: list[str] = field(default_factory=list)
    create_vpc_endpoints: bool = True
    create_database_proxy: bool = True
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
    # Not a parameter: true for the stack's own network, where the template gives the functions
    # IPv6 (Ipv6AllowedForDualStack) and the SDK the services' dual-stack endpoints.
    functions_use_dual_stack: bool = False


@dataclass
class Finding:
    status: str
    check: str
    detail: str
    fix: str = ""


class Clients:
    """The AWS clients the checks read with, each made on first use (bounded timeouts: a CLI
    should not hang)."""

    def __init__(self, region: str, factory: Callable[[str], Any] | None = None) -> None:
        self._make = factory or _boto3_factory(region)
        self.region: str = self.ec2.meta.region_name

    @cached_property
    def ec2(self) -> Any:
        return self._make("ec2")

    @cached_property
    def secretsmanager(self) -> Any:
        return self._make("secretsmanager")

    @cached_property
    def kms(self) -> Any:
        return self._make("kms")

    @cached_property
    def lambda_(self) -> Any:
        return self._make("lambda")

    @cached_property
    def cloudformation(self) -> Any:
        return self._make("cloudformation")

    @cached_property
    def route53(self) -> Any:
        return self._make("route53")

    @cached_property
    def route53profiles(self) -> Any:
        return self._make("route53profiles")

    @cached_property
    def organizations(self) -> Any:
        return self._make("organizations")

    @cached_property
    def iam(self) -> Any:
        return self._make("iam")

    @cached_property
    def sts(self) -> Any:
        return self._make("sts")

    @cached_property
    def servicequotas(self) -> Any:
        return self._make("service-quotas")


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


# Why a call failed decides the fix: each kind below has its own.
ACCESS_DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "AuthorizationError",
    "UnauthorizedOperation",
}
CREDENTIALS_REFUSED = {
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "AuthFailure",
}
NOT_FOUND = {"ResourceNotFoundException", "NotFoundException", "NoSuchHostedZone"}
NO_CREDENTIALS = "credentials"


def is_not_implemented(exc: Exception) -> bool:
    """moto (and other emulators) answer an operation they lack with 404 "Not yet implemented";
    AWS never does."""
    if isinstance(exc, NotImplementedError):
        return True
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    return (
        str(error.get("Code")) == "404"
        and "not yet implemented" in str(error.get("Message", "")).lower()
    )


def is_not_found(exc: Exception) -> bool:
    code = error_code(exc)
    return code in NOT_FOUND or code.endswith(".NotFound") or "does not exist" in str(exc)


def is_access_denied(exc: Exception) -> bool:
    return error_code(exc) in ACCESS_DENIED


def could_not_check(
    check: str, exc: Exception, actions: str, region: str, *, required: bool = True
) -> Finding:
    """The finding for a call that failed: missing credentials, a resource that is not in this
    region, access denied and an operation the endpoint lacks each get their own fix. A check
    that is ``required`` fails when it cannot be made; an optional one warns."""
    code = error_code(exc)
    unchecked = FAIL if required else WARN
    if type(exc).__name__ in {"NoCredentialsError", "PartialCredentialsError"}:
        return Finding(
            FAIL,
            NO_CREDENTIALS,
            "no AWS credentials found: nothing could be read",
            "sign in first (aws configure, aws sso login, or AWS_PROFILE=…), then run it again",
        )
    if code in CREDENTIALS_REFUSED:
        return Finding(
            FAIL,
            NO_CREDENTIALS,
            f"AWS refused the credentials ({code}): expired, or not valid in this account",
            "sign in again (aws sso login, or fresh keys), then run it again",
        )
    if is_not_implemented(exc):
        return Finding(
            WARN,
            check,
            "could not check: this endpoint does not implement the call (moto or an emulator)",
            "run preflight against the real account to check it",
        )
    if is_access_denied(exc):
        return Finding(
            unchecked,
            check,
            f"could not check: access denied ({code})",
            f"run preflight with a role allowed {actions}",
        )
    if is_not_found(exc):
        return Finding(
            FAIL,
            check,
            f"not found in {region}: {exc}",
            f"check the ID, and that it lives in {region}, the region the stack deploys to "
            "(--region, or samconfig.toml's region)",
        )
    return Finding(
        unchecked,
        check,
        f"could not check: {code}",
        "run preflight again; if it persists, the error above is AWS's own",
    )
