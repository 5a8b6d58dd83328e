"""`webhook-inbox invoke`: every events/ fixture through the built artifacts, in a fresh process.

The function reaches real local services only through what the template declares: the test's
PostgreSQL through an RDS-shaped secret in a moto server (``DatabaseSecretArn`` overridden, as for
an existing database), the queue and bus through an ``--env-vars`` file, moto itself through the
caller's ``AWS_ENDPOINT_URL``. Its answer must be what the in-process fixture test expects.

Two builds: one this module lays out like `sam build`'s (function folders, each layer's python/
with its packages, the runtime layer's dependencies copied from this environment, bytecode
compiled),
and the real ``.aws-sam/build`` that infra/check-template.sh leaves (CI runs it before pytest,
so there a missing build fails instead of skipping).
"""

from __future__ import annotations

import compileall
import functools
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from moto.server import ThreadedMotoServer
from packaging.requirements import Requirement
from psycopg.conninfo import conninfo_to_dict

from tests.infra_support import resources_of_type, serverless_functions
from tests.integration.infra.conftest import ResponseRecorder
from tests.integration.infra.test_event_fixtures import (
    FIXTURES,
    SAMPLE_PROVIDERS,
    assert_expected_result,
    owner_of,
)
from tests.support import EVENTS_DIR, ROOT

REAL_BUILD = ROOT / ".aws-sam" / "build"
LAYER = "SharedLayer"
EXIT_USAGE, EXIT_TIMEOUT = 2, 124


# --- a build laid out like sam's ---------------------------------------------------------


def _distributions(requirements: list[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions the requirements pull in, extras and markers honoured."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [Requirement(line) for line in requirements]
    while todo:
        req = todo.pop()
        dist = importlib.metadata.distribution(req.name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for spec in dist.requires or []:
            dep = Requirement(spec)
            extras = req.extras or {""}
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in extras):
                todo.append(dep)
    return found


def lay_out_build(build: Path) -> Path:
    """Function folders and layers as `sam build` leaves them, with this platform's wheels."""
    compiled = []
    for function, props in serverless_functions().items():
        shutil.copytree(ROOT / str(props["CodeUri"]), build / function)
        compiled.append(build / function)
    for layer, res in resources_of_type("AWS::Serverless::LayerVersion").items():
        source, site = ROOT / str(res["Properties"]["ContentUri"]), build / layer / "python"
        site.mkdir(parents=True)
        for package in (p for p in source.iterdir() if (p / "__init__.py").is_file()):
            shutil.copytree(package, site / package.name)
            compiled.append(site / package.name)
        if (source / "requirements.txt").is_file():
            _copy_dependencies(source / "requirements.txt", site)
    for folder in compiled:
        assert compileall.compile_dir(
            folder,
            quiet=1,
            invalidation_mode=compileall.py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    return build


def _copy_dependencies(requirements_file: Path, site: Path) -> None:
    requirements = [
        line.strip()
        for line in requirements_file.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for dist in _distributions(requirements).values():
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # console scripts live outside site-packages; bytecode is rebuilt
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(str(dist.locate_file(file))), target)


@pytest.fixture(scope="module")
def made_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lay_out_build(tmp_path_factory.mktemp("sam-like") / "build")


def real_build() -> Path:
    if not (REAL_BUILD / LAYER).is_dir():
        required = os.environ.get("WEBHOOK_INBOX_REQUIRE_SAM_BUILD") == "1"  # set by .ci/run
        if required or os.environ.get("CI", "").lower() == "true":
            pytest.fail(
                f"{REAL_BUILD} is missing: CI runs infra/check-template.sh (sam build) first"
            )
        pytest.skip(f"no {REAL_BUILD}: run infra/check-template.sh (sam build) to test it too")
    return REAL_BUILD


# --- local services --------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def cli_environment(moto_endpoint: str) -> dict[str, str]:
    """A shell with AWS settings aimed at moto and nothing of this test process's environment."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto_endpoint,
    }


@pytest.fixture
def services(
    moto_endpoint: str, database_url: str, response_url: ResponseRecorder, tmp_path: Path
) -> dict[str, Any]:
    """Fresh moto resources for this test's database, and the env-vars file naming them."""
    clients = {
        name: boto3.client(name, endpoint_url=moto_endpoint, region_name="us-east-1")
        for name in ("sqs", "events", "secretsmanager")
    }
    suffix = tmp_path.name[-20:].replace("_", "-")
    params = conninfo_to_dict(database_url)
    secret = {
        "username": params.get("user", "postgres"),
        "password": params.get("password", ""),
        # A Unix socket directory is a percent-encoded host in a libpq URI.
        "host": quote(str(params.get("host", "localhost")), safe=""),
        "port": int(params.get("port") or 5432),
        "dbname": params["dbname"],
        "sslmode": "disable",
    }
    secret_arn = clients["secretsmanager"].create_secret(
        Name=f"db-{suffix}", SecretString=json.dumps(secret)
    )["ARN"]
    queue_url = clients["sqs"].create_queue(QueueName=f"processing-{suffix}")["QueueUrl"]
    bus = f"outbox-{suffix}"
    clients["events"].create_event_bus(Name=bus)
    env_vars = tmp_path / "env.json"
    env_vars.write_text(
        json.dumps(
            {
                "Parameters": {
                    "PROCESSING_QUEUE_URL": queue_url,
                    "OUTBOX_EVENT_BUS_NAME": bus,
                    # No providers registry (ingest and the sweeper read it): PROVIDERS_CONFIG
                    # serves, as on a stack not using it.
                    "PROVIDERS_REGISTRY_ARN": "",
                },
                "IngestFunction": {
                    "PROVIDERS_CONFIG": (EVENTS_DIR / SAMPLE_PROVIDERS).read_text(),
                },
            }
        )
    )
    return {
        "database_url": database_url,
        "response_url": response_url,
        "env_vars": env_vars,
        "secret_arn": secret_arn,
        "queue_url": queue_url,
        "sqs": clients["sqs"],
        "shell": cli_environment(moto_endpoint),
    }


def invoke(
    *args: str, shell: dict[str, str], cwd: Path = ROOT, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook_inbox_tools.cli", "invoke", *args],
        cwd=cwd,
        env=shell,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def event_file(fixture: str, tmp_path: Path, response_url: ResponseRecorder) -> Path:
    event = json.loads((EVENTS_DIR / fixture).read_text())
    if owner_of(fixture) == "MigrationsFunction":
        event["ResponseURL"] = response_url.url  # the pre-signed S3 URL, on loopback
    path = tmp_path / fixture
    path.write_text(json.dumps(event))
    return path


def run_fixture(
    build: Path, fixture: str, services: dict[str, Any], tmp: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = tmp / "imports.json"
    done = invoke(
        owner_of(fixture),
        "-e",
        str(event_file(fixture, tmp, services["response_url"])),
        "--env-vars",
        str(services["env_vars"]),
        "--parameter-overrides",
        f"DatabaseSecretArn={services['secret_arn']}",
        "--build-dir",
        str(build),
        "--report-imports",
        str(report),
        shell=services["shell"],
    )
    assert done.returncode == 0, done.stderr
    assert f"running {owner_of(fixture)} from the build in {build}" in done.stderr
    return done, json.loads(report.read_text())


@functools.cache
def standard_library_of(executable: str) -> frozenset[Path]:
    """The standard library folders of the interpreter the child ran (the Lambda runtime's
    version), asked of that interpreter itself: the test's own may be another version."""
    probe = (
        "import json, sys, sysconfig; "
        "base = {'base': sys.base_prefix, 'platbase': sys.base_exec_prefix}; "
        "print(json.dumps([sysconfig.get_paths(vars=base)[k] for k in ('stdlib', 'platstdlib')]))"
    )
    done = subprocess.run(
        [executable, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True
    )
    return frozenset(Path(p).resolve() for p in json.loads(done.stdout))


def assert_only_function_layers_and_stdlib(
    build: Path, function: str, imports: dict[str, Any]
) -> None:
    """The child's path and every module it loaded: the function's own build folder, its
    layers' folders, or the interpreter's standard library (what Lambda mounts and ships)."""
    stdlib = standard_library_of(imports["executable"])
    layers = [str(layer["Ref"]) for layer in serverless_functions()[function]["Layers"]]
    allowed = [(build / name).resolve() for name in (function, *layers)]

    def inside(path: str) -> bool:
        resolved = Path(path).resolve()
        if any(resolved.is_relative_to(root) for root in allowed):
            return True
        # The interpreter's own site-packages sits inside its stdlib folder: not part of Lambda.
        return "site-packages" not in resolved.parts and any(
            resolved.is_relative_to(root) for root in stdlib
        )

    entries = [p for p in imports["sys_path"] if Path(p).exists()]
    assert all(inside(p) for p in entries), imports["sys_path"]
    files = {name: f for name, f in imports["modules"].items() if f}
    outside = {name: f for name, f in files.items() if not inside(f)}
    assert not outside, outside
    source_tree = [
        f for f in files.values() if Path(f).resolve().is_relative_to(ROOT / "layers")
    ] + [f for f in files.values() if Path(f).resolve().is_relative_to(ROOT / "functions")]
    assert not source_tree, source_tree
    # The handler and the runtime package did come from the build.
    assert Path(files["webhook_inbox"]).resolve().is_relative_to(build.resolve() / LAYER)
    assert "site-packages" not in json.dumps(imports["sys_path"])


# --- the tests -------------------------------------------------------------------------


@pytest.fixture(params=["sam-like build", "sam build"])
def build(request: pytest.FixtureRequest) -> Path:
    if request.param == "sam build":
        return real_build()
    made: Path = request.getfixturevalue("made_build")
    return made


@pytest.mark.parametrize("fixture", FIXTURES)
def test_each_fixture_through_a_build_answers_as_in_process(
    fixture: str, build: Path, services: dict[str, Any], tmp_path: Path
) -> None:
    done, imports = run_fixture(build, fixture, services, tmp_path)

    assert_expected_result(
        owner_of(fixture),
        json.loads(done.stdout),
        database_url=services["database_url"],
        sqs=services["sqs"],
        queue_url=services["queue_url"],
        response_url=services["response_url"],
    )
    assert_only_function_layers_and_stdlib(build, owner_of(fixture), imports)


def test_a_variable_without_a_local_value_is_named_not_traced(
    made_build: Path, moto_endpoint: str, tmp_path: Path
) -> None:
    env_vars = tmp_path / "env.json"
    env_vars.write_text(json.dumps({"SweeperFunction": {"PROCESSING_QUEUE_URL": "http://q"}}))

    done = invoke(
        "SweeperFunction",
        "-e",
        str(EVENTS_DIR / "schedule.json"),
        "--env-vars",
        str(env_vars),
        "--build-dir",
        str(made_build),
        shell=cli_environment(moto_endpoint),
    )

    assert done.returncode == EXIT_USAGE
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert "DATABASE_SECRET_ARN (the template sets it to !Ref DatabaseConnectionSecret)" in (
        done.stderr
    )
    assert "OUTBOX_EVENT_BUS_NAME (the template sets it to !Ref OutboxEventBus)" in done.stderr
    assert "PROCESSING_QUEUE_URL" not in done.stderr  # the file gave it


def test_without_a_build_it_runs_the_source_tree_and_says_so(
    services: dict[str, Any], tmp_path: Path
) -> None:
    report = tmp_path / "imports.json"
    done = invoke(
        "SweeperFunction",
        "-e",
        str(EVENTS_DIR / "schedule.json"),
        "--env-vars",
        str(services["env_vars"]),
        "--parameter-overrides",
        f"DatabaseSecretArn={services['secret_arn']}",
        "--source",
        "--report-imports",
        str(report),
        shell=services["shell"],
    )

    assert done.returncode == 0, done.stderr
    assert "from the SOURCE TREE (functions/sweeper/)" in done.stderr
    imports = json.loads(report.read_text())
    package = Path(imports["modules"]["webhook_inbox"]).resolve()
    assert package.is_relative_to(ROOT / "layers" / "shared"), package


# --- timeouts and failures, with functions of their own ----------------------------------

TEMPLATE = """\
Transform: AWS::Serverless-2016-10-31
Globals:
  Function:
    Runtime: python{version}
    Timeout: 1
Resources:
  SlowFunction:
    Type: AWS::Serverless::Function
    Properties: {{CodeUri: slow/, Handler: app.handler}}
  FailingFunction:
    Type: AWS::Serverless::Function
    Properties: {{CodeUri: failing/, Handler: app.handler, Timeout: 5}}
"""
SLOW = """\
import sys, time

def handler(event, context):
    print("remaining_ms", context.get_remaining_time_in_millis(), file=sys.stderr, flush=True)
    time.sleep(30)
    return "finished"
"""
FAILING = """\
import boto3  # Lambda's runtime provides it even when no layer ships it

def handler(event, context):
    raise ValueError("no such order: " + event["order"])
"""


@pytest.fixture
def small_project(tmp_path: Path) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (tmp_path / "template.yaml").write_text(TEMPLATE.format(version=version))
    for function, code in {"SlowFunction": SLOW, "FailingFunction": FAILING}.items():
        (tmp_path / ".aws-sam" / "build" / function).mkdir(parents=True)
        (tmp_path / ".aws-sam" / "build" / function / "app.py").write_text(code)
    return tmp_path


def test_a_function_past_its_timeout_is_stopped_and_exits_124(
    small_project: Path, moto_endpoint: str
) -> None:
    done = invoke(
        "SlowFunction", shell=cli_environment(moto_endpoint), cwd=small_project, timeout=25
    )

    assert done.returncode == EXIT_TIMEOUT, done.stderr
    answer = json.loads(done.stdout)
    assert answer["errorType"] == "Sandbox.Timedout"
    assert answer["errorMessage"] == "Task timed out after 1.00 seconds"
    remaining = int(done.stderr.split("remaining_ms ", 1)[1].split()[0])
    assert 0 < remaining <= 1000


def test_an_unhandled_error_is_lambdas_error_document_and_exit_1(
    small_project: Path, moto_endpoint: str, tmp_path: Path
) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"order": "o-17"}))

    done = invoke(
        "FailingFunction", "-e", str(event), shell=cli_environment(moto_endpoint), cwd=small_project
    )

    assert done.returncode == 1, done.stderr
    answer = json.loads(done.stdout)
    assert answer["errorType"] == "ValueError"
    assert answer["errorMessage"] == "no such order: o-17"
    assert "Traceback" in done.stderr  # the function's log, as Lambda writes it
    assert "no layer ships boto3" in done.stderr
