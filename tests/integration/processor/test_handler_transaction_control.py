"""A handler cannot end the batch's transaction (issue 14, defect 4).

The fast pass opened its transaction with a raw ``BEGIN``, so a handler's ``conn.rollback()``
undid the events handled before it and its ``conn.commit()`` committed them early; the batched
mark then recorded every event ``processed`` although some writes were gone. Both passes now run
the batch inside ``conn.transaction()``, where psycopg refuses an explicit commit or rollback:
the event that tried fails (it is retried), the others commit with their writes.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processor.helpers import failures, invoke, row, sqs_event_for, store_event
from webhook_inbox.inbox import LeasedEvent


def _customers(conn: psycopg.Connection[Any]) -> set[str]:
    return {r[0] for r in conn.execute("SELECT customer_id FROM customers").fetchall()}


@pytest.mark.parametrize("ends_it", [psycopg.Connection.rollback, psycopg.Connection.commit])
def test_a_handler_that_ends_the_transaction_fails_itself_and_no_one_else(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    ends_it: Callable[[psycopg.Connection[Any]], None],
) -> None:
    ids = [
        store_event(
            conn, event_type="customer.created", payload={"data": {"object": {"id": f"cus_{i}"}}}
        )
        for i in range(3)
    ]
    rogue = store_event(conn, event_type="charge.refunded", payload={})
    after = store_event(
        conn, event_type="customer.created", payload={"data": {"object": {"id": "cus_after"}}}
    )

    def ends_the_transaction(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        ends_it(c)

    registry[("stripe", "charge.refunded")] = ends_the_transaction

    assert failures(invoke(processor, sqs_event_for([*ids, rogue, after]))) == []

    # Every event marked processed has its write; the rogue event failed on its own.
    assert _customers(conn) == {"cus_0", "cus_1", "cus_2", "cus_after"}
    for row_id in (*ids, after):
        assert row(conn, row_id)["status"] == "processed"
    assert row(conn, rogue)["status"] == "failed"
    # psycopg's refusal (a ProgrammingError, translated like every driver error), in its words.
    name = ends_it.__name__
    assert row(conn, rogue)["last_error"].startswith(
        f"ProgrammingError: Explicit {name}() forbidden within a Transaction context"
    )
