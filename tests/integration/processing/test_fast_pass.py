"""The pipelined fast pass: it commits only when the whole batch went through.

Its own failure paths: a lease lost before the batched mark (while a handler runs, or after the
last one), and a handler statement whose failure surfaces only at the pipeline's one sync
(nobody read its answer). Either way nothing of the fast pass commits — its BEGIN, marks and
COMMIT travel in the same pipeline, and the first error aborts the rest — the session is idle
again before the careful pass, which records each event's own outcome.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from bench.common import count_wire
from tests.integration.processing.helpers import failures, invoke, row, sqs_event_for, store_event
from webhook_inbox.processing import passes
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


def test_a_lease_lost_after_the_last_handler_stops_the_commit_queued_behind_the_mark(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    database_url: str,
    log_output: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease goes between the handlers and the batched mark: the mark fails in the database
    (nobody reads its answer before COMMIT is sent), so COMMIT never runs; the pass rolls back
    and leaves the session idle, and the careful pass runs only the rows still ours."""
    first, second, third = store_customer_events(conn, 3)
    ignored = store_event(conn, event_type="charge.refunded", payload={})
    send_batch_marks = inbox.send_batch_marks

    def lease_lost_first(c: psycopg.Connection[Any], **marks: Any) -> Any:
        # Another worker's lease, written directly: the lease statement skips rows this batch
        # holds locked (its outbox messages' foreign key takes a KEY SHARE lock on theirs).
        with psycopg.connect(database_url, autocommit=True) as other:
            other.execute(
                "UPDATE webhook_events SET lease_owner = 'other-worker', attempts = attempts + 1,"
                " lease_expires_at = now() + interval '60 seconds' WHERE id = ANY(%s)",
                ([second, ignored],),
            )
        return send_batch_marks(c, **marks)

    monkeypatch.setattr(inbox, "send_batch_marks", lease_lost_first)
    seen_by_careful: list[tuple[TransactionStatus, int, int, int]] = []
    careful = passes.careful

    def careful_after_the_fast_pass(c: psycopg.Connection[Any], *args: Any, **kw: Any) -> Any:
        # What the fast pass left: the processor's session, and what it committed (nothing).
        monkeypatch.setattr(inbox, "send_batch_marks", send_batch_marks)
        (customers,) = conn.execute("SELECT count(*) FROM customers").fetchone() or (0,)
        (messages,) = conn.execute("SELECT count(*) FROM outbox_messages").fetchone() or (0,)
        (marked,) = conn.execute(
            "SELECT count(*) FROM webhook_events WHERE status IN ('processed', 'ignored')"
        ).fetchone() or (0,)
        seen_by_careful.append((c.info.transaction_status, customers, messages, marked))
        return careful(c, *args, **kw)

    monkeypatch.setattr(passes, "careful", careful_after_the_fast_pass)

    assert failures(invoke(processor, sqs_event_for([first, second, third, ignored]))) == []

    assert fast_pass_log_reasons(log_output.getvalue()) == ["lease_lost"]
    assert seen_by_careful == [(TransactionStatus.IDLE, 0, 0, 0)]
    assert db.get_connection().info.transaction_status == TransactionStatus.IDLE
    for row_id in (second, ignored):  # the other worker's now; not run again by us
        assert (row(conn, row_id)["status"], row(conn, row_id)["lease_owner"]) == (
            "processing",
            "other-worker",
        )
    assert conn.execute("SELECT customer_id FROM customers ORDER BY 1").fetchall() == [
        ("cus_0",),
        ("cus_2",),
    ]
    assert conn.execute("SELECT source_event_id FROM outbox_messages ORDER BY 1").fetchall() == [
        (first,),
        (third,),
    ]
    assert [row(conn, i)["status"] for i in (first, third)] == ["processed", "processed"]


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


def test_a_batch_of_nine_takes_eleven_round_trips_and_writes_in_one_transaction(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    row_ids = store_customer_events(conn, 10)
    invoke(processor, sqs_event_for([row_ids[0]]))  # opens the processor's connection
    processor_conn = db.get_connection()

    with count_wire(processor_conn) as box:
        assert failures(invoke(processor, sqs_event_for(row_ids[1:]))) == []

    # lease, one wait per handler (9: BEGIN travels with the first), and the pipeline's one
    # sync, which carries the guard's check, the batched mark and COMMIT
    assert (box[0].round_trips, box[0].commits) == (11, 2)
    # No savepoints: the domain rows, messages and marks of the batch share one transaction id.
    xids = conn.execute(
        "SELECT DISTINCT xmin::text FROM customers WHERE customer_id <> 'cus_0'"
        " UNION SELECT DISTINCT xmin::text FROM outbox_messages WHERE source_event_id <> %(first)s"
        " UNION SELECT DISTINCT xmin::text FROM webhook_events WHERE id <> %(first)s",
        {"first": row_ids[0]},
    ).fetchall()
    assert len(xids) == 1
