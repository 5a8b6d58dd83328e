"""`webhook-inbox dev --sam-env-vars`: the file's contents and the commands it prints, per mode."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tests.support import ROOT
from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.cli import dev
from webhook_inbox_tools.dev import sam_env

STACK = sam_env.LocalStack(
    endpoint="http://host.docker.internal:5000",
    queue_url="http://host.docker.internal:5000/123456789012/webhook-inbox-dev-processing",
    bus_name="webhook-inbox-dev",
    database_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbCdEf",
    providers_config='{"providers": {}}',
    providers_registry_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:reg-AbCdEf",
)
ENV_FILE = Path("/work/env.json")


def test_every_function_gets_the_templates_variables_with_local_values_where_needed() -> None:
    document = sam_env.env_vars_document(
        ROOT / "template.yaml", sam_env.local_values(STACK), region="us-east-1"
    )

    assert set(document) == {
        "Parameters",
        "IngestFunction",
        "ProcessorFunction",
        "SweeperFunction",
        "MigrationsFunction",
        "DatabaseLogGroupsFunction",
        "DatabaseProtectionFunction",
        "IdleLedgerCleanupFunction",
        "OperatorReadFunction",
        "OperatorActFunction",
    }
    # No idle ledger locally: the dev stack's sweeper connects every run.
    assert document["SweeperFunction"]["IDLE_LEDGER_BUCKET"] == ""
    assert document["IngestFunction"]["IDLE_LEDGER_BUCKET"] == ""
    assert document["ProcessorFunction"]["PROCESSING_QUEUE_URL"] == STACK.queue_url
    assert document["IngestFunction"]["PROVIDERS_REGISTRY_ARN"] == STACK.providers_registry_arn
    assert document["ProcessorFunction"]["MAX_ATTEMPTS"] == "8"  # the parameter's default
    assert document["MigrationsFunction"]["DB_STATEMENT_TIMEOUT_MS"] == "240000"  # its own
    assert document["SweeperFunction"]["AWS_ENDPOINT_URL"] == STACK.endpoint
    assert document["SweeperFunction"]["AWS_USE_DUALSTACK_ENDPOINT"] == ""  # moto: no IPv6 names
    assert document["Parameters"]["DATABASE_SECRET_ARN"] == STACK.database_secret_arn
    assert document["OperatorActFunction"]["OPERATOR_LEVEL"] == "act"
    assert document["OperatorActFunction"]["PROCESSING_QUEUE_URL"] == STACK.queue_url


def test_a_deployed_only_variable_without_a_local_value_stops_dev_by_name() -> None:
    values = sam_env.local_values(STACK)
    del values["OUTBOX_EVENT_BUS_NAME"]

    with pytest.raises(ConfigurationError) as raised:
        sam_env.env_vars_document(ROOT / "template.yaml", values, region="us-east-1")

    assert (
        "SweeperFunction: OUTBOX_EVENT_BUS_NAME (the template sets it to !Ref OutboxEventBus)"
        in (str(raised.value))
    )


def test_the_database_secret_is_rds_shaped_and_never_a_unix_socket() -> None:
    secret = sam_env.rds_secret(
        "postgresql://postgres:p%40ss@host.docker.internal:55432/postgres?sslmode=disable"
    )

    assert secret == {
        "username": "postgres",
        "password": "p@ss",
        "host": "host.docker.internal",
        "port": 55432,
        "dbname": "postgres",
        "sslmode": "disable",
    }
    with pytest.raises(ConfigurationError, match="Unix socket"):
        sam_env.rds_secret("postgresql://postgres@/postgres?host=/tmp/pg")


def test_addresses_are_rewritten_for_the_functions_host_name() -> None:
    assert sam_env.with_host("http://127.0.0.1:5000/1/q", "host.docker.internal") == (
        "http://host.docker.internal:5000/1/q"
    )
    assert sam_env.with_host("http://127.0.0.1:5000", "::1") == "http://[::1]:5000"


def commands(container_host: str, bind_host: str) -> list[str]:
    return sam_env.commands(
        ENV_FILE, container_host=container_host, bind_host=bind_host, region="us-east-1"
    )


def test_loopback_prints_only_the_docker_free_invoke() -> None:
    printed = commands("127.0.0.1", "127.0.0.1")

    assert printed[0] == (
        "webhook-inbox invoke IngestFunction -e events/apigw-v2-post.json "
        "--env-vars /work/env.json --region us-east-1"
    )
    assert not any(line.startswith("sam ") for line in printed)


def test_docker_desktop_prints_sam_local_without_extra_hosts() -> None:
    printed = commands("host.docker.internal", "127.0.0.1")

    assert printed[0] == (
        "sam local invoke IngestFunction -e events/apigw-v2-post.json "
        "--env-vars /work/env.json --region us-east-1"
    )
    assert "sam local start-api --port 3001 --env-vars /work/env.json --region us-east-1" in (
        printed
    )
    assert not any("--add-host" in line or "webhook-inbox" in line for line in printed)


def test_docker_engine_on_linux_maps_the_name_to_the_bridge() -> None:
    by_name = commands("host.docker.internal", "172.17.0.1")
    by_address = commands("172.17.0.1", "172.17.0.1")

    assert all(line.endswith("--add-host host.docker.internal:host-gateway") for line in by_name)
    assert not any("--add-host" in line for line in by_address)
    # The bridge address is this machine's too: the Docker-free invoke works with that file.
    assert any(line.startswith("webhook-inbox invoke ") for line in by_address)


def test_options_that_shape_the_file_need_the_file() -> None:
    parser = argparse.ArgumentParser()
    dev.add_arguments(parser)

    with pytest.raises(ConfigurationError, match="--container-host only shape"):
        dev.postgres_port(parser.parse_args(["--container-host", "host.docker.internal"]))
    assert dev.postgres_port(parser.parse_args([])) is None
    assert dev.postgres_port(parser.parse_args(["--sam-env-vars", "env.json"])) == 0
    assert dev.postgres_port(parser.parse_args(["--postgres-port", "5433"])) == 5433
