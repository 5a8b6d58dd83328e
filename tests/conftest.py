"""Session-wide fixtures: a real PostgreSQL (never skipped), per-test databases, AWS isolation."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support import TEMPLATE_DB, FakeLambdaContext, PostgresServer, unique_db_name
from webhook_inbox import config
from webhook_inbox.processing import handlers
from webhook_inbox_app.handlers import HANDLERS as APPLICATION_HANDLERS

# The fault layer's fixtures (a proxy in front of PostgreSQL or moto), for every suite.
pytest_plugins = ["tests.faults.fixtures"]

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
    ``config.reset()`` itself)."""
    config.reset()
    yield
    config.reset()


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
    from webhook_inbox.store.migrate import migrate

    url = pg_server.create_database(TEMPLATE_DB)
    with psycopg.connect(url) as conn:
        migrate(conn)
        migrate(conn, package="webhook_inbox_app")
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
