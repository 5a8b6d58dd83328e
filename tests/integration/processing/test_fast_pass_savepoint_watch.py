"""The fast pass's guard marks the transaction only after a handler that may have left a
savepoint open (docs/design.md, "A handler cannot end the batch").

The end of the transaction is caught whatever a handler sent it through (the batch's setting);
a rewind needs a savepoint an earlier handler left open, which the connection's cursors and its
``conn.transaction()`` blocks tell of. These cases send the savepoint in the other shapes a
handler may use (a cursor, composed SQL, bytes, a leading comment) and check that a later
handler's ``ROLLBACK TO`` it still sends the batch the careful way; and that the happy path costs
the guard two statements per batch, whatever its size.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg import sql

from bench.common import count_wire
from tests.integration.processing.helpers import failures, invoke, row, sqs_event_for, store_event
from tests.integration.processing.test_fast_pass import fast_pass_log_reasons
from webhook_inbox.store import db
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox_app import examples

Send = Callable[[psycopg.Connection[Any]], object]

SHAPES: dict[str, Send] = {
    "a cursor": lambda c: c.cursor().execute("SAVEPOINT left_open"),
    "composed SQL": lambda c: c.execute(
        sql.SQL("SAVEPOINT {}").format(sql.Identifier("left_open"))
    ),
    "bytes, lower case": lambda c: c.execute(b"  savepoint left_open"),
    "a leading comment": lambda c: c.execute("/* keep going */ SAVEPOINT left_open"),
}


def _event(conn: psycopg.Connection[Any], customer_id: str, event_type: str) -> int:
    return store_event(
        conn, event_type=event_type, payload={"data": {"object": {"id": customer_id}}}
    )


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_savepoint_left_open_in_any_shape_is_marked_and_its_rewind_caught(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    log_output: Any,
    shape: str,
) -> None:
    def leaves_a_savepoint_open(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        SHAPES[shape](c)
        examples.stripe_customer_created(c, event)

    def rolls_back_to_it(c: psycopg.Connection[Any], _event: LeasedEvent) -> None:
        c.execute("ROLLBACK TO SAVEPOINT left_open")

    registry[("stripe", "opens.event")] = leaves_a_savepoint_open
    registry[("stripe", "rewinds.event")] = rolls_back_to_it
    opener = _event(conn, "cus_open", "opens.event")
    mate = _event(conn, "cus_mate", "customer.created")
    rewinder = _event(conn, "cus_rewind", "rewinds.event")

    assert failures(invoke(processor, sqs_event_for([opener, mate, rewinder]))) == []

    # The check failed (its computed cast), and the careful pass ran the batch: the opener's and
    # the mate's writes applied once, the rewinder's ROLLBACK TO an ordinary failing statement.
    assert fast_pass_log_reasons(log_output.getvalue()) == ["InvalidTextRepresentation"]
    assert (row(conn, opener)["status"], row(conn, mate)["status"]) == ("processed", "processed")
    assert conn.execute("SELECT customer_id FROM customers ORDER BY 1").fetchall() == [
        ("cus_mate",),
        ("cus_open",),
    ]
    assert row(conn, rewinder)["status"] == "failed"


def test_a_handler_that_leaves_a_transaction_block_open_is_marked(database_url: str) -> None:
    """psycopg's own savepoints (``conn.transaction()``) bypass the cursors: the connection
    counts the blocks still open at the end of a handler instead."""
    conn = db.connect(database_url)
    try:
        conn.autocommit = True
        with db.handler_batch(conn, pipelined=True):
            conn.execute("BEGIN")
            conn.watch_savepoints()
            with conn.transaction():
                conn.execute("SELECT 1")
            assert not conn.savepoint_may_be_open()  # closed before the handler returned
            block = conn.transaction()
            block.__enter__()  # left open by a handler
            assert conn.savepoint_may_be_open()
            block.__exit__(None, None, None)
            assert not conn.savepoint_may_be_open()
            conn.execute("SAVEPOINT mine")
            assert conn.savepoint_may_be_open()
            assert not conn.savepoint_may_be_open()  # asked once per handler
            conn.execute("ROLLBACK")
        assert not conn.watching  # the batch's end stops the watch
    finally:
        conn.close()


def test_the_happy_path_costs_the_guard_two_statements_per_batch(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    ids = [_event(conn, f"cus_{i}", "customer.created") for i in range(10)]
    processor_conn = db.get_connection()

    with count_wire(processor_conn) as box:
        assert failures(invoke(processor, sqs_event_for(ids))) == []

    # The lease and the batch's marks are WITH statements, the example handler's customer an
    # INSERT and its outbox message a SELECT (of webhook_inbox_add_message, one per event): the
    # other SELECTs are the guard's, the batch's transaction recorded and the check.
    assert box[0].statements.count("INSERT") == len(ids), box[0].statements
    assert box[0].statements.count("SELECT") == 2 + len(ids), box[0].statements
    assert all(row(conn, i)["status"] == "processed" for i in ids)
