"""The built functions against a running `webhook-inbox dev --sam-env-vars FILE`.

A real dev process (its embedded PostgreSQL on TCP with a password, moto, the three workers)
writes the env-vars file `sam local invoke` would read. The file must give each function every
variable the template sets for it and every one its code reads; its values must reach that
stack (the database secret in moto, PostgreSQL over TCP, the queue the stack's processor
consumes); and every events/ fixture, run from a build by `webhook-inbox invoke` with nothing
but that file, must answer as it does in-process. Lambda containers cannot run here: what
`sam local` adds (the container, its network) is the part left untested.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest

from tests.e2e.dev_support import DevProcess, processes_mentioning
from tests.infra_support import (
    function_entry,
    module_closure,
    serverless_functions,
    settings_variables,
    unset_by_design,
)
from tests.integration.infra.conftest import ResponseRecorder
from tests.integration.infra.test_event_fixtures import (
    FIXTURES,
    SAMPLE_PROVIDERS,
    assert_expected_answer,
    owner_of,
)
from tests.integration.infra.test_invoke_command import (
    assert_only_function_layers_and_stdlib,
    event_file,
    invoke,
    made_build,
    real_build,
)
from tests.support import EVENTS_DIR
from tests.unit.infra.test_template_consistency import LOCAL_ONLY_ENV
from webhook_inbox.store import credentials
from webhook_inbox_tools.dev.reaper import stop_postgres

__all__ = ["made_build"]  # a fixture the build fixture below asks for by name

FUNCTIONS = serverless_functions()
REGION = "us-east-1"


class DevStack:
    """The dev process, its env-vars file and its own (Unix socket) database URL."""

    def __init__(self, process: DevProcess) -> None:
        self.process = process
        self.pg_dir = process.wait_for(r"started a throwaway PostgreSQL in (\S+)")[1]
        self.database_url = process.wait_for(r"DATABASE_URL=(\S+)")[1]
        path = process.wait_for(r"SAM env-vars for the built functions written to (\S+);")[1]
        process.wait_for(r"ready; Ctrl-C stops everything")
        self.env_vars = Path(path)
        self.document: dict[str, dict[str, str]] = json.loads(self.env_vars.read_text())

    def stop(self) -> int:
        """Ctrl-C, as a terminal sends it; the exit status."""
        os.killpg(self.process.proc.pid, signal.SIGINT)
        return self.process.proc.wait(timeout=60)


def start_dev_stack() -> Iterator[DevStack]:
    process = DevProcess("--sam-env-vars", "sam-env.json")
    stack = None
    try:
        stack = DevStack(process)
        yield stack
        assert stack.stop() == 0
        assert not stack.env_vars.exists(), "dev leaves no env-vars file naming a dead stack"
        # The postmaster this module started itself (to listen on TCP) stops with the stack.
        deadline = time.monotonic() + 10
        while processes_mentioning(stack.pg_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_mentioning(stack.pg_dir) == []
    finally:
        if process.proc.poll() is None:
            os.killpg(process.proc.pid, signal.SIGKILL)
            process.proc.wait(timeout=10)
            # SIGKILL to the group takes the reaper with it: stop its PostgreSQL here.
            if stack is not None:
                stop_postgres(Path(stack.pg_dir))
                shutil.rmtree(stack.pg_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def dev_stack() -> Iterator[DevStack]:
    yield from start_dev_stack()


def bare_shell(tmp_path: Path) -> dict[str, str]:
    """No AWS settings, no credentials, no database: whatever the function reaches, the file
    told it about. The empty HOME would also hide pyenv's installs (found under ~/.pyenv), where
    the Lambda runtime's Python lives when the tests run on another version: name their root."""
    shell = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    if pyenv_root.is_dir():
        shell["PYENV_ROOT"] = str(pyenv_root)
    return shell


def aws_client(service: str, variables: dict[str, str]) -> Any:
    return boto3.client(
        service,
        endpoint_url=variables["AWS_ENDPOINT_URL"],
        region_name=REGION,
        aws_access_key_id="dev",
        aws_secret_access_key="dev",
    )


# --- the file ------------------------------------------------------------------------------


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_the_file_gives_every_variable_the_template_sets_and_the_code_reads(
    function: str, dev_stack: DevStack
) -> None:
    variables = dev_stack.document[function]
    template_sets = set(FUNCTIONS[function]["Environment"]["Variables"])
    entry, _ = function_entry(FUNCTIONS[function])
    code_reads = (
        settings_variables(module_closure(entry))
        - set(LOCAL_ONLY_ENV)
        - unset_by_design(FUNCTIONS[function])
    )

    assert set(variables) == template_sets
    assert code_reads <= set(variables), code_reads - set(variables)
    if not template_sets:  # DatabaseLogGroupsFunction: outside the VPC, no settings at all
        return
    # What the template gives only a deployed stack has a local value here.
    assert variables["DATABASE_IAM_AUTH"] == "false"
    assert variables["DATABASE_SECRET_ARN"].startswith("arn:aws:secretsmanager:us-east-1:")
    assert variables["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


def test_its_values_reach_the_running_stack(dev_stack: DevStack) -> None:
    with psycopg.connect(dev_stack.database_url) as conn:
        (stack_system,) = conn.execute(
            "SELECT system_identifier FROM pg_control_system()"
        ).fetchone() or (None,)
    bus = dev_stack.document["SweeperFunction"]["OUTBOX_EVENT_BUS_NAME"]
    for function, variables in dev_stack.document.items():
        if function == "Parameters" or "DATABASE_SECRET_ARN" not in variables:
            continue  # Parameters is not a function; DatabaseLogGroupsFunction has no settings
        secret = json.loads(
            aws_client("secretsmanager", variables).get_secret_value(
                SecretId=variables["DATABASE_SECRET_ARN"]
            )["SecretString"]
        )
        conninfo = credentials.conninfo_from_rds_secret(secret)
        with psycopg.connect(conninfo) as conn:  # TCP, with the secret's password
            system, over_tcp = conn.execute(
                "SELECT (SELECT system_identifier FROM pg_control_system()),"
                " inet_server_port() IS NOT NULL"
            ).fetchone() or (None, None)
        assert (system, over_tcp) == (stack_system, True), function
        if "PROCESSING_QUEUE_URL" in variables:
            attributes = aws_client("sqs", variables).get_queue_attributes(
                QueueUrl=variables["PROCESSING_QUEUE_URL"], AttributeNames=["QueueArn"]
            )["Attributes"]
            assert attributes["QueueArn"].endswith(":webhook-inbox-dev-processing"), function
    aws_client("events", dev_stack.document["SweeperFunction"]).describe_event_bus(Name=bus)
    ingest = dev_stack.document["IngestFunction"]
    providers = json.loads(ingest["PROVIDERS_CONFIG"])["providers"]
    sample = json.loads((EVENTS_DIR / SAMPLE_PROVIDERS).read_text())["providers"]
    assert providers == sample


def test_postgresql_over_tcp_wants_the_password(dev_stack: DevStack) -> None:
    variables = dev_stack.document["SweeperFunction"]
    secret = json.loads(
        aws_client("secretsmanager", variables).get_secret_value(
            SecretId=variables["DATABASE_SECRET_ARN"]
        )["SecretString"]
    )

    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(credentials.conninfo_from_rds_secret({**secret, "password": "wrong"}))
    assert secret["password"]


# --- the functions, from a build, against it -----------------------------------------------


@pytest.fixture(scope="module", params=["sam-like build", "sam build"])
def build(request: pytest.FixtureRequest) -> Path:
    if request.param == "sam build":
        return real_build()
    made: Path = request.getfixturevalue("made_build")
    return made


def wait_for_status(database_url: str, event_id: str, timeout: float = 30) -> str | None:
    """The row's status once it stops moving (received/processing are on the way)."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT status FROM webhook_events WHERE event_id = %s", (event_id,)
            ).fetchone()
        status = row[0] if row else None
        if status not in (None, "received", "processing"):
            return status
        time.sleep(0.2)
    return status


OUTCOMES = {"accepted", "duplicate", "rejected", "handshake", "unavailable", "error"}


def deliveries(logs: str) -> list[dict[str, Any]]:
    """The ingest function's delivery lines (JSON, the outcome as message) on its stderr."""
    records = (json.loads(line) for line in logs.splitlines() if line.startswith("{"))
    return [record for record in records if record.get("message") in OUTCOMES]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_each_fixture_through_a_build_against_the_dev_stack_answers_as_in_process(
    fixture: str,
    build: Path,
    dev_stack_per_build: DevStack,
    response_url: ResponseRecorder,
    tmp_path: Path,
) -> None:
    stack = dev_stack_per_build
    function = owner_of(fixture)
    report = tmp_path / "imports.json"

    done = invoke(
        function,
        "-e",
        str(event_file(fixture, tmp_path, response_url)),
        "--env-vars",
        str(stack.env_vars),
        "--build-dir",
        str(build),
        "--region",
        REGION,
        "--report-imports",
        str(report),
        shell=bare_shell(tmp_path),
    )

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert_expected_answer(function, answer)
    assert_only_function_layers_and_stdlib(build, function, json.loads(report.read_text()))
    if function == "IngestFunction":
        # The wake-up went to the file's queue (a failed send is still a 202: the sweeper
        # would enqueue the row later, so only the function's log tells), and the stack's
        # processor finished the stored event (the sample "acme" has no handler).
        assert [
            (d.get("level", "INFO"), d["message"], d.get("detail")) for d in deliveries(done.stderr)
        ] == [("INFO", "accepted", None)]
        event_id = json.loads(json.loads((EVENTS_DIR / fixture).read_text())["body"])["id"]
        assert wait_for_status(stack.database_url, event_id) == "ignored"
    elif function == "MigrationsFunction":
        assert [a["Status"] for a in response_url.bodies()] == ["SUCCESS"]


@pytest.fixture(scope="module")
def dev_stack_per_build(build: Path) -> Iterator[DevStack]:
    """A fresh stack for each build: every ingest fixture is new to its database."""
    yield from start_dev_stack()
