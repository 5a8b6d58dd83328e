"""Bad invocations through the installed console script: a message, an exit code, no traceback."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
from typing import Any

import psycopg

from tests.integration.cli.conftest import CONSOLE_SCRIPT, run_console_script, seed_event
from tests.support import FIXTURE_APPLICATION

UNREACHABLE = "postgresql://x:s3cret-pw@127.0.0.1:9/x"


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err
    assert err.startswith("error:") or err.startswith("usage:")


def test_unreachable_database_names_the_masked_url_and_how_to_set_it() -> None:
    result = run_console_script("status", env={"DATABASE_URL": UNREACHABLE})
    assert result.returncode == 3
    _no_traceback(result.stderr)
    assert "127.0.0.1:9" in result.stderr
    assert "x:****@" in result.stderr
    assert "s3cret-pw" not in result.stderr
    assert "DATABASE_URL" in result.stderr


def test_unreachable_database_given_on_the_command_line() -> None:
    result = run_console_script("events", "list", "--database-url", UNREACHABLE)
    assert result.returncode == 3
    assert "from --database-url" in result.stderr
    assert "s3cret-pw" not in result.stderr


def test_no_database_configured_is_a_configuration_error() -> None:
    result = run_console_script("status", env={"DATABASE_SECRET_ARN": ""})
    assert result.returncode == 2
    _no_traceback(result.stderr)
    assert "DATABASE_URL" in result.stderr


def test_unknown_event(database_url: str) -> None:
    result = run_console_script(
        "events", "show", "stripe", "evt_missing", env={"DATABASE_URL": database_url}
    )
    assert result.returncode == 1
    _no_traceback(result.stderr)
    assert "evt_missing" in result.stderr


def test_unknown_event_in_a_replay(database_url: str) -> None:
    result = run_console_script(
        "replay", "stripe", "evt_missing", "--reason", "r", "--json",
        env={"DATABASE_URL": database_url, "USER": "ci"},
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["outcomes"][0]["outcome"] == "not_found"


def test_malformed_provider_name_is_a_usage_error(database_url: str) -> None:
    result = run_console_script(
        "events", "list", "--provider", "Not A Provider", env={"DATABASE_URL": database_url}
    )
    assert result.returncode == 2
    _no_traceback(result.stderr)
    assert "not a provider name" in result.stderr


def test_unknown_command_and_missing_reason_are_usage_errors() -> None:
    assert run_console_script("frobnicate").returncode == 2
    result = run_console_script("replay", "stripe", "evt_1")
    assert result.returncode == 2
    assert "--reason" in result.stderr


def test_database_without_the_schema_says_to_migrate(empty_database_url: str) -> None:
    result = run_console_script("status", env={"DATABASE_URL": empty_database_url})
    assert result.returncode == 2
    _no_traceback(result.stderr)
    assert "webhook-inbox migrate" in result.stderr


def test_migrate_then_status_through_the_console_script(empty_database_url: str) -> None:
    env = {"DATABASE_URL": empty_database_url}
    migrated = run_console_script("migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert "applied" in migrated.stdout
    status = run_console_script("status", "--json", env=env)
    assert status.returncode == 0
    assert json.loads(status.stdout)["events"]["received"]["count"] == 0


def test_without_operator_or_user_the_audit_row_records_login_at_host(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    # A container without $USER (issue 16): the replay goes ahead and says who acted.
    seed_event(conn, "evt_1", status="dead_letter", attempts=8)
    result = run_console_script(
        "replay", "stripe", "evt_1", "--reason", "r",
        env={"DATABASE_URL": database_url, "USER": "", "LOGNAME": ""},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    who = conn.execute("SELECT operator FROM operator_actions").fetchall()
    assert who == [(f"{pwd.getpwuid(os.getuid()).pw_name}@{socket.gethostname()}",)]


def test_a_database_url_that_does_not_parse_is_a_configuration_error_without_echoing_it() -> None:
    for source, argv, env in (
        ("--database-url", ["--database-url", "not a url s3cret-pw"], {}),
        ("DATABASE_URL", [], {"DATABASE_URL": "not a url s3cret-pw"}),
    ):
        result = run_console_script("status", *argv, env=env)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"error: {source} is not a PostgreSQL URL or conninfo string "
            "(e.g. postgresql://user:password@host:5432/dbname)"
        ]


def test_an_aws_client_without_a_region_says_what_to_set(tmp_path: Any) -> None:
    config = tmp_path / "providers.json"
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe"
    config.write_text(json.dumps({"providers": {"stripe": {
        "scheme": "stripe", "secrets": [{"secret_arn": arn}]}}}))  # fmt: skip
    body = tmp_path / "body.json"
    body.write_text('{"id": "evt_1"}')
    # A laptop without an AWS configuration: no region variables, no config file.
    env = {k: v for k, v in os.environ.items() if k not in {"AWS_REGION", "AWS_DEFAULT_REGION"}}
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "sign", "stripe", str(body), "--providers", str(config)],
        env={**env, "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: cannot read provider secret: NoRegionError "
        "(no AWS region is configured: set AWS_REGION or AWS_DEFAULT_REGION)"
    ]


def test_an_application_that_does_not_import_stops_only_what_needs_it(
    tmp_path: Any, database_url: str
) -> None:
    # Your application's handlers with a typo, shadowing the installed package: the operator
    # commands work on (an operator lists and replays events while the handler is fixed), and
    # dev, which runs the handlers, says where the error is before it starts anything.
    shutil.copytree(FIXTURE_APPLICATION / "webhook_inbox_app", tmp_path / "webhook_inbox_app",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    handlers = tmp_path / "webhook_inbox_app" / "handlers.py"
    handlers.write_text(handlers.read_text() + "\ndef broken(:\n")
    env = {"PYTHONPATH": str(tmp_path), "DATABASE_URL": database_url}

    assert run_console_script("--help", env=env).returncode == 0
    listed = run_console_script("events", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    dev = run_console_script("dev", "--port", "0", "--env-file", str(tmp_path / "dev.env"),
                             env=env)  # fmt: skip
    assert dev.returncode == 2
    assert dev.stderr.splitlines() == [
        "error: your application does not import (webhook_inbox_app.handlers): SyntaxError: "
        f"invalid syntax at {handlers}, line {len(handlers.read_text().splitlines())}"
    ]
    assert "throwaway PostgreSQL" not in dev.stdout


def test_a_reader_that_goes_away_stops_the_listing_quietly(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    # `webhook-inbox events list --json | head -1`: the reader closes the pipe before the
    # command has written. Closing our end before the child writes makes that deterministic.
    for i in range(50):
        seed_event(conn, f"evt_pipe_{i}")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["DATABASE_URL"] = database_url
    child = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "events", "list", "--json", "--limit", "50"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    child.stdout.close()
    _, err = child.communicate(timeout=60)
    assert child.returncode == 141
    assert err == ""
