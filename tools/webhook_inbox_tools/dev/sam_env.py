"""The SAM ``--env-vars`` file that points the built functions at the running dev stack.

``sam local invoke`` / ``sam local start-api`` (and ``webhook-inbox invoke``) set only the
variables template.yaml declares for a function, so the file gives each function every variable
the template sets for it: a local value where the stack has one (the moto endpoint, the queue,
the bus, the database secret, the providers), else the template's own value, resolved as
``webhook-inbox invoke`` resolves it (parameter defaults, samconfig.toml's local-invoke
overrides). A variable the template sets from a deployed resource that has no local value here
stops ``dev`` with its name, so the file never lacks one silently.

The database travels as a deployed function reads it: ``DATABASE_SECRET_ARN`` names an
RDS-shaped secret (in moto) for PostgreSQL over TCP with a password. Every address is the one the
functions use to reach this machine (``container_host``): loopback for ``webhook-inbox invoke``,
``host.docker.internal`` or a bridge address for Lambda containers.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.dev.env_file import cli_name
from webhook_inbox_tools.dev.stack import REGION, DevStack
from webhook_inbox_tools.local_invoke import template

SECRET_NAME = "webhook-inbox-dev/database"  # noqa: S105 - a name, not a secret
DOCKER_HOST_NAME = "host.docker.internal"
# events/ fixtures the printed commands use, by function.
EXAMPLE_EVENTS = {
    "IngestFunction": "events/apigw-v2-post.json",
    "ProcessorFunction": "events/sqs-batch.json",
    "SweeperFunction": "events/schedule.json",
}


@dataclass(frozen=True)
class LocalStack:
    """The running stack as the functions reach it."""

    endpoint: str  # moto
    queue_url: str
    bus_name: str
    database_secret_arn: str
    providers_config: str  # a PROVIDERS_CONFIG document
    providers_registry_arn: str  # the dev stack's registry (served once a command writes it)


def local_values(stack: LocalStack) -> dict[str, str]:
    """Each variable whose local value differs from what the template would give it."""
    return {
        "AWS_ENDPOINT_URL": stack.endpoint,
        # The template's own network says "true"; the local stack has only its one URL.
        "AWS_USE_DUALSTACK_ENDPOINT": "",
        "DATABASE_SECRET_ARN": stack.database_secret_arn,
        # The secret holds a password, not an RDS Proxy's IAM login; it also says where to
        # connect, so the location overrides stay empty.
        "DATABASE_IAM_AUTH": "false",
        "DATABASE_HOST": "",
        "DATABASE_PORT": "",
        "DATABASE_NAME": "",
        "DB_STARTUP_OPTIONS": "on",  # a plain PostgreSQL takes the timeouts at connect
        "PROCESSING_QUEUE_URL": stack.queue_url,
        "PROVIDERS_CONFIG": stack.providers_config,
        "PROVIDERS_REGISTRY_ARN": stack.providers_registry_arn,
        "OUTBOX_DESTINATION": "eventbridge",
        "OUTBOX_EVENT_BUS_NAME": stack.bus_name,
        "OUTBOX_TOPIC_ARN": "",
        # No idle ledger locally: every sweeper run connects, and nothing marks activity
        # (docs/design.md, "Idle means idle").
        "IDLE_LEDGER_BUCKET": "",
        "POWERTOOLS_SERVICE_NAME": "webhook-inbox",
    }


# Shared by every function of the stack: SAM applies "Parameters" to functions the file does not
# name, such as one added to the template later.
SHARED = ("AWS_ENDPOINT_URL", "DATABASE_SECRET_ARN", "DATABASE_IAM_AUTH", "PROCESSING_QUEUE_URL")


def env_vars_document(
    template_path: Path, values: Mapping[str, str], *, region: str
) -> dict[str, dict[str, str]]:
    """``{"Parameters": {...}, "<FunctionLogicalId>": {every variable the template sets}}``."""
    tpl = template.open_template(
        template_path,
        samconfig=template_path.parent / "samconfig.toml",
        config_env="default",
        overrides=[],
        region=region,
    )
    document: dict[str, dict[str, str]] = {"Parameters": {k: values[k] for k in SHARED}}
    missing = []
    for logical_id in sorted(tpl.resources("AWS::Serverless::Function")):
        spec = template.function_spec(tpl, logical_id)
        entry = {}
        for name, declared in spec.environment.items():
            if name in values:
                entry[name] = values[name]
            elif isinstance(declared, template.Unresolved):
                missing.append(f"  {logical_id}: {name} (the template sets it to {declared.what})")
            else:
                entry[name] = declared
        document[logical_id] = entry
    if missing:
        raise ConfigurationError(
            f"{template_path} sets variables the dev stack has no local value for:\n"
            + "\n".join(missing)
        )
    return document


def rds_secret(conninfo: str) -> dict[str, Any]:
    """The RDS secret JSON shape (what DATABASE_SECRET_ARN holds) for a TCP connection string."""
    params = conninfo_to_dict(conninfo)
    host = str(params.get("host") or "")
    if not host or host.startswith("/"):
        raise ConfigurationError(
            "a Lambda container cannot reach PostgreSQL on a Unix socket: leave --database-url "
            "unset (the embedded server then listens on TCP too) or give a TCP URL"
        )
    return {
        "username": params.get("user", "postgres"),
        "password": params.get("password", ""),
        "host": host,
        "port": int(params.get("port") or 5432),
        "dbname": params.get("dbname", "postgres"),
        "sslmode": params.get("sslmode", "disable"),
    }


def database_url_for_functions(stack: DevStack, container_host: str) -> str:
    """The stack's PostgreSQL over TCP, addressed as the functions reach it."""
    if stack.postgres_tcp is not None:  # the embedded server runs on this machine
        return stack.postgres_tcp.tcp_url(container_host)
    host = str(conninfo_to_dict(stack.database_url).get("host") or "")
    if is_loopback(host) and not is_loopback(container_host):
        return make_conninfo(stack.database_url, host=container_host)
    return stack.database_url


def write_for_stack(
    stack: DevStack,
    path: Path,
    *,
    container_host: str,
    template_path: Path,
    providers_config: str,
) -> None:
    """Create the database secret in the stack's moto and write the env-vars file to ``path``."""
    import boto3

    secrets = boto3.client("secretsmanager", region_name=REGION, endpoint_url=stack.endpoint)
    secret = rds_secret(database_url_for_functions(stack, container_host))
    arn = secrets.create_secret(Name=SECRET_NAME, SecretString=json.dumps(secret))["ARN"]
    local = LocalStack(
        endpoint=with_host(stack.endpoint, container_host),
        queue_url=with_host(stack.queue_url, container_host),
        bus_name=stack.bus_name,
        database_secret_arn=arn,
        providers_config=providers_config,
        providers_registry_arn=stack.providers_registry_arn,
    )
    write(path, env_vars_document(template_path, local_values(local), region=REGION))


def with_host(url: str, host: str) -> str:
    """``url`` with its host replaced (the port kept): how a container addresses the same server."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    shown = f"[{host}]" if ":" in host else host
    return parts._replace(netloc=f"{shown}{port}").geturl()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def write(path: Path, document: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.chmod(0o600)  # it names the database secret, and PROVIDERS_CONFIG may inline secrets


def commands(env_file: Path, *, container_host: str, bind_host: str, region: str) -> list[str]:
    """The commands to copy, for the addresses this file was written with."""
    env = shlex.quote(str(env_file))
    lines = []
    if not is_loopback(container_host):
        extra = ""
        if container_host == DOCKER_HOST_NAME and not is_loopback(bind_host):
            # Docker Engine on Linux knows the name only when told (Docker Desktop knows it).
            extra = f" --add-host {DOCKER_HOST_NAME}:host-gateway"
        for function, event in EXAMPLE_EVENTS.items():
            lines.append(
                f"sam local invoke {function} -e {event} --env-vars {env} --region {region}{extra}"
            )
        lines.append(f"sam local start-api --port 3001 --env-vars {env} --region {region}{extra}")
    if is_loopback(container_host) or container_host == bind_host:
        for function, event in EXAMPLE_EVENTS.items():
            lines.append(
                f"{cli_name()} invoke {function} -e {event} --env-vars {env} --region {region}"
            )
    return lines
