"""`webhook-inbox console --stack S`: the console's pages through a stack's operator Function
URLs (the SigV4-checking stand-in in front of the real operator function), with the caller's own
credentials — IAM decides what the console may do, and the audit records the caller's ARN."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.integration.cli.conftest import seed_event
from tests.integration.cli.test_stack_commands import ON_CALL, Stack, stack
from tests.integration.tools.test_console_pages import Browser
from webhook_inbox_tools.cli.operator_backend import backend_for
from webhook_inbox_tools.console.pages import Pages
from webhook_inbox_tools.console.server import ConsoleServer

__all__ = ["stack"]  # the fixture, imported for pytest


@pytest.fixture
def console_over(stack: Stack) -> Iterator[Any]:
    """A console over stack S as the principal whose key is given (its own backend, as the
    command builds it)."""
    made: list[tuple[ConsoleServer, Any]] = []

    def start(key: str) -> Browser:
        stack.as_principal(key)
        backend = backend_for(argparse.Namespace(stack="S", region=None))
        server = ConsoleServer(Pages(backend), 0, quiet=True)
        server.start()
        made.append((server, backend))
        browser = Browser(server)
        browser.log_in()
        return browser

    yield start
    for server, backend in made:
        server.shutdown()
        server.server_close()
        backend.close()


def test_a_reader_browses_through_the_read_url_and_may_not_replay(
    console_over: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_dead", status="dead_letter", attempts=8, error="boom")
    browser = console_over("AKIAREADER0000000001")

    status, _, page = browser.request("GET", "/events?status=dead_letter")
    assert status == 200
    assert "evt_dead" in page
    assert "stack S" in page
    assert browser.request("GET", "/events/stripe/evt_dead")[0] == 200
    status, _, refused = browser.request(
        "POST",
        "/replay",
        {"provider": "stripe", "id": "evt_dead", "reason": "r", "step": "preview"},
    )
    assert status == 502
    assert "OperatorActPolicy" in refused  # what to attach, as the CLI says it
    assert conn.execute("SELECT count(*) FROM operator_actions").fetchone() == (0,)
    assert {level for level, _ in stack.standin.calls} == {"read", "act"}
    assert ("act", 403) in stack.standin.calls


def test_an_on_call_principal_replays_and_the_page_and_audit_name_its_arn(
    console_over: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    row = seed_event(conn, "evt_dead", status="dead_letter", attempts=8, error="boom")
    browser = console_over("AKIAONCALL0000000001")
    form = {"provider": "stripe", "id": "evt_dead", "reason": "handler fixed"}

    assert "would_replay" in browser.request("POST", "/replay", {**form, "step": "preview"})[2]
    status, _, done = browser.request("POST", "/replay", {**form, "step": "confirm"})
    assert status == 200
    assert "replayed (sent)" in done
    assert ON_CALL.arn in done  # "acting as", from the function's answer
    assert conn.execute(
        "SELECT operator, reason FROM operator_actions WHERE event_row_id = %s", (row,)
    ).fetchall() == [(ON_CALL.arn, "handler fixed")]
    assert stack.queue.drain() == [{"id": row}]
