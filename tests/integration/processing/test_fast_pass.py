"""The pipelined fast pass: it commits only when the whole batch went through.

Its own failure paths: a lease lost before the batched mark, and a handler statement whose
failure surfaces only at the batched mark (nobody read its answer). Either way nothing of the
fast pass commits, and the careful pass records each event's own outcome.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import psycopg

from bench.common import count_wire
from tests.integration.processing.helpers import failures, invoke, row, sqs_event_for, store_event
from webhook_inbox.store import db, inbox
from webhook_inbox.store.inbox import LeasedEvent


def store_customer_events(conn: psycopg.Connection[Any], n: int) -> list[int]:
    return [
        store_event(
            conn, event_type="customer.created", payload={"data": {"object": {"id": f"cus_{i}"}}}
        )
        for i in range(n)
    ]


def take_over_lease(database_url: str, row_id: int) -> None:
    """Another worker takes the row, as if our lease had expired."""
    # A bounded lock wait: a row our transaction has locked must fail the test, not hang it.
    with psycopg.connect(database_url, autocommit=True, options="-c lock_timeout=2000") as other:
        other.execute(
            "UPDATE webhook_events SET lease_expires_at = now() - interval '1 second'"
            " WHERE id = %s",
            (row_id,),
        )
        assert inbox.lease_events(other, [row_id], owner="other-worker", lease_seconds=60)


def fast_pass_log_reasons(log: str) -> list[str]:
    return [
        record["reason"]
        for record in map(json.loads, log.splitlines())
        if record.get("message") == "fast pass rolled back, batch run again event by event"
    ]


def test_a_lease_lost_before_the_batched_mark_commits_nothing_of_the_fast_pass(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    database_url: str,
    log_output: Any,
) -> None:
    first, second, third = store_customer_events(conn, 3)
    ignored = store_event(conn, event_type="charge.refunded", payload={})
    real_handler = registry[("stripe", "customer.created")]
    taken: list[int] = []

    def steals_then_handles(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        # While the first event is handled, another worker takes it and the ignored row (as if
        # our leases had expired); the handler's writes still go into the fast pass's transaction.
        if event.id == first and not taken:
            taken.extend((first, ignored))
            for row_id in taken:
                take_over_lease(database_url, row_id)
        real_handler(c, event)

    registry[("stripe", "customer.created")] = steals_then_handles

    assert failures(invoke(processor, sqs_event_for([first, second, third, ignored]))) == []

    assert fast_pass_log_reasons(log_output.getvalue()) == ["lease_lost"]
    # The rows taken over belong to the other worker, untouched by us and not run again.
    for row_id in (first, ignored):
        assert (row(conn, row_id)["status"], row(conn, row_id)["lease_owner"]) == (
            "processing",
            "other-worker",
        )
        assert row(conn, row_id)["attempts"] == 2
    # The first event's domain change and message were rolled back with the fast pass; the two
    # survivors were processed by the careful pass, each change and message exactly once.
    assert conn.execute("SELECT customer_id FROM customers ORDER BY 1").fetchall() == [
        ("cus_1",),
        ("cus_2",),
    ]
    assert conn.execute("SELECT source_event_id FROM outbox_messages ORDER BY 1").fetchall() == [
        (second,),
        (third,),
    ]
    assert {row(conn, second)["status"], row(conn, third)["status"]} == {"processed"}


def test_an_unread_failing_statement_in_the_last_handler_is_caught_before_the_commit(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    log_output: Any,
) -> None:
    def fails_without_reading(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        c.execute(
            "INSERT INTO customers (provider, customer_id, status) VALUES ('x', 'y', 'active')"
        )
        c.execute("SELECT 1 / 0")  # in pipeline mode nothing waits for this answer here

    registry[("stripe", "invoice.paid")] = fails_without_reading
    good = store_customer_events(conn, 2)
    bad = store_event(conn, event_type="invoice.paid", payload={})

    assert failures(invoke(processor, sqs_event_for([*good, bad]))) == []

    assert fast_pass_log_reasons(log_output.getvalue()) == ["DivisionByZero"]
    failed = row(conn, bad)
    assert (failed["status"], failed["last_error"]) == ("failed", "DivisionByZero: 22012")
    assert conn.execute("SELECT customer_id FROM customers ORDER BY 1").fetchall() == [
        ("cus_0",),
        ("cus_1",),
    ]
    assert [row(conn, row_id)["status"] for row_id in good] == ["processed", "processed"]


def test_a_batch_of_ten_takes_fifteen_round_trips_and_writes_in_one_transaction(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    row_ids = store_customer_events(conn, 10)
    invoke(processor, sqs_event_for([row_ids[0]]))  # opens the processor's connection
    processor_conn = db.get_connection()

    with count_wire(processor_conn) as box:
        assert failures(invoke(processor, sqs_event_for(row_ids[1:]))) == []

    # lease, BEGIN, one wait per handler (9), the batched mark, the pipeline's sync, COMMIT
    assert (box[0].round_trips, box[0].commits) == (14, 2)
    # No savepoints: the domain rows, messages and marks of the batch share one transaction id.
    xids = conn.execute(
        "SELECT DISTINCT xmin::text FROM customers WHERE customer_id <> 'cus_0'"
        " UNION SELECT DISTINCT xmin::text FROM outbox_messages WHERE source_event_id <> %(first)s"
        " UNION SELECT DISTINCT xmin::text FROM webhook_events WHERE id <> %(first)s",
        {"first": row_ids[0]},
    ).fetchall()
    assert len(xids) == 1
