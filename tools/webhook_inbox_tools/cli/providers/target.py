"""Which providers registry a ``providers`` command acts on: a deployed stack's, or the running
``webhook-inbox dev``'s (its moto holds the registry the same way AWS does).

A stack names its registry secret in the output ``ProvidersRegistryArn``; the stack's
``ProvidersConfig`` parameter is what the first write imports. A dev names both in its env
file (``PROVIDERS_REGISTRY_ARN``, ``PROVIDERS_CONFIG`` or ``PROVIDERS_CONFIG_FILE``).
"""

from __future__ import annotations

import argparse
import json
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from webhook_inbox.errors import ConfigurationError, WebhookInboxError
from webhook_inbox_tools.dev.env_file import DEFAULT_ENV_FILE, running_dev_environment

REGISTRY_OUTPUT = "ProvidersRegistryArn"
CONFIG_PARAMETER = "ProvidersConfig"
DEV_REGISTRY_VARIABLE = "PROVIDERS_REGISTRY_ARN"
NO_TARGET = (
    "no stack named: pass --stack STACK (the deployed stack's name), or run "
    "`webhook-inbox dev` in this folder to act on its local registry"
)


class ProvidersError(ConfigurationError):
    """A providers command is misconfigured or would write an invalid configuration (exit 2)."""


class ProviderRefused(WebhookInboxError):
    """The change does not apply to the registry as it is: a name that exists, one that does
    not, nothing to import (exit 1, as other refused operator actions)."""


class AwsCallFailed(WebhookInboxError):
    """An AWS call failed; raised ``from`` the botocore error so the CLI's set-up hints (no
    region, no credentials) apply (exit 1, or 2 with a hint)."""


@dataclass
class Target:
    """One registry and how to reach it: ``label`` names it in messages."""

    label: str
    make_client: Callable[[str], Any]
    stack_name: str | None = None
    dev_env: Mapping[str, str] = field(default_factory=dict)

    @cached_property
    def secretsmanager(self) -> Any:
        return self.make_client("secretsmanager")

    @cached_property
    def cloudformation(self) -> Any:
        return self.make_client("cloudformation")

    @cached_property
    def sts(self) -> Any:
        return self.make_client("sts")

    @cached_property
    def cloudwatch(self) -> Any:
        return self.make_client("cloudwatch")

    @cached_property
    def _stack(self) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        try:
            stacks = self.cloudformation.describe_stacks(StackName=self.stack_name)["Stacks"]
        except ClientError as exc:
            if "does not exist" in str(exc):
                raise ProvidersError(
                    f"no stack {self.stack_name!r} in {self.region}: check --stack and --region"
                ) from None
            raise
        stack: dict[str, Any] = stacks[0]
        return stack

    @property
    def region(self) -> str:
        return str(self.secretsmanager.meta.region_name)

    def registry_arn(self) -> str:
        if self.stack_name is None:
            arn = self.dev_env.get(DEV_REGISTRY_VARIABLE, "")
            if not arn:
                raise ProvidersError(
                    f"the running webhook-inbox dev has no providers registry "
                    f"({DEV_REGISTRY_VARIABLE} is not in {DEFAULT_ENV_FILE}): restart it with "
                    "this version"
                )
            return arn
        outputs = {o["OutputKey"]: o["OutputValue"] for o in self._stack.get("Outputs", [])}
        if REGISTRY_OUTPUT not in outputs:
            raise ProvidersError(
                f"stack {self.stack_name!r} has no output {REGISTRY_OUTPUT}: it was deployed "
                "before the providers registry; `sam deploy` this version first"
            )
        return str(outputs[REGISTRY_OUTPUT])

    def deployed_config(self) -> dict[str, Any]:
        """The providers of the deploy-time configuration (``ProvidersConfig``), which ingest
        serves until the registry is first written."""
        if self.stack_name is None:
            text = self._dev_config_text()
        else:
            parameters = {
                p["ParameterKey"]: p.get("ParameterValue", "")
                for p in self._stack.get("Parameters", [])
            }
            text = parameters.get(CONFIG_PARAMETER) or '{"providers": {}}'
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ProvidersError(f"{CONFIG_PARAMETER} is not JSON: {exc}") from None
        providers = document.get("providers") if isinstance(document, dict) else None
        if not isinstance(providers, dict):
            raise ProvidersError(f'{CONFIG_PARAMETER} has no "providers" object')
        return providers

    def _dev_config_text(self) -> str:
        if self.dev_env.get("PROVIDERS_CONFIG"):
            return self.dev_env["PROVIDERS_CONFIG"]
        path = Path(self.dev_env.get("PROVIDERS_CONFIG_FILE", ""))
        try:
            text = path.read_text("utf-8")
        except OSError as exc:
            raise ProvidersError(f"cannot read dev's providers file {path}: {exc}") from None
        return json.dumps(tomllib.loads(text)) if path.suffix == ".toml" else text


def add_target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stack",
        metavar="STACK",
        help="the deployed stack's name (default: the webhook-inbox dev running in this folder)",
    )
    parser.add_argument(
        "--region", help="the stack's AWS region (default: AWS_REGION, else your profile's)"
    )


def _client_factory(region: str | None, **settings: str) -> Callable[[str], Any]:
    import boto3
    from botocore.config import Config

    # Bounded: a command on a laptop should fail, not hang, when AWS is out of reach.
    config = Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 3})
    session = boto3.session.Session(
        region_name=region or None,
        aws_access_key_id=settings.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=settings.get("AWS_SECRET_ACCESS_KEY"),
    )
    endpoint = settings.get("AWS_ENDPOINT_URL")

    def make(service: str) -> Any:
        return session.client(service, config=config, endpoint_url=endpoint)  # type: ignore[call-overload]

    return make


def resolve_target(args: argparse.Namespace) -> Target:
    """``--stack`` (AWS), else the running dev (its moto), else an error saying which to use."""
    from botocore.exceptions import NoRegionError

    if args.stack:
        try:
            make = _client_factory(args.region)
            make("sts")  # a missing region is reported here, once
        except NoRegionError:
            raise ProvidersError(
                "no AWS region: pass --region, or set AWS_REGION or your profile's region"
            ) from None
        return Target(f"stack {args.stack}", make, stack_name=args.stack)
    dev_env = running_dev_environment()
    if not dev_env:
        raise ProvidersError(NO_TARGET)
    return dev_target(dev_env)


def dev_target(dev_env: Mapping[str, str]) -> Target:
    """The registry in the moto of the dev whose env file is ``dev_env``."""
    make = _client_factory(
        dev_env.get("AWS_REGION") or dev_env.get("AWS_DEFAULT_REGION") or "us-east-1",
        **{k: v for k, v in dev_env.items() if k.startswith("AWS_")},
    )
    return Target("the local webhook-inbox dev", make, dev_env=dev_env)
