"""A handler cannot end or rewind the batch's transaction (issue 14 defect 4, issue 24 item 1).

The processor's connection refuses a handler's ``commit()`` / ``rollback()`` in either pass
(``webhook_inbox.store.db.handler_batch``), but the same sent as SQL went through: in the fast
pass a ``ROLLBACK`` undid the writes of the events before it, and the batched mark then recorded
them ``processed`` outside any transaction. Now every handler runs in a savepoint of ours with a
mark inside it, checked right after the handler (``webhook_inbox.processing.handler_guard``):
the fast pass gives up, the careful pass dead-letters the offender alone
(``transaction_control``, on its first attempt) and runs its batch-mates as if it were not
there.

Each case runs in three ways: the handler takes the transaction in the fast pass only (the
careful pass then runs it normally), in the careful pass only (a flaky batch-mate sends the
batch there), and in both. Domain tables and inbox rows are checked with SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.helpers import failures, invoke, row, sqs_event_for, store_event
from tests.integration.processing.test_fast_pass import fast_pass_log_reasons
from webhook_inbox.store import db
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox_app import examples

ROLLED_BACK = "ended the transaction, which rolled back (ROLLBACK or ABORT, or a refused PREPARE)"
COMMITTED = "ended the transaction, which committed (COMMIT or END)"

# What the handler runs after its own (conditional) write, what the careful pass records, and
# whether the write it made before survives (a COMMIT cannot be taken back).
CASES: dict[str, tuple[Callable[[psycopg.Connection[Any]], Any], str, bool]] = {
    "ROLLBACK": (lambda c: c.execute("ROLLBACK"), ROLLED_BACK, False),
    "ABORT": (lambda c: c.execute("ABORT"), ROLLED_BACK, False),
    "COMMIT": (lambda c: c.execute("COMMIT"), COMMITTED, True),
    "END": (lambda c: c.execute("END"), COMMITTED, True),
    "ROLLBACK AND CHAIN": (
        lambda c: c.execute("ROLLBACK AND CHAIN"),
        "ended the transaction and began another (ROLLBACK AND CHAIN)",
        False,
    ),
    "COMMIT AND CHAIN": (
        lambda c: c.execute("COMMIT AND CHAIN"),
        "ended the transaction and began another (COMMIT AND CHAIN)",
        True,
    ),
    "RELEASE": (
        lambda c: c.execute("RELEASE SAVEPOINT webhook_inbox_handler"),
        "released a savepoint it did not create (RELEASE)",
        False,
    ),
    "ROLLBACK TO": (
        lambda c: c.execute("ROLLBACK TO SAVEPOINT webhook_inbox_handler"),
        "rolled back to a savepoint it did not create (ROLLBACK TO)",
        False,
    ),
    # max_prepared_transactions is 0 (PostgreSQL's and RDS's default): the server refuses the
    # PREPARE, which rolls the transaction back; the handler sees the error.
    "PREPARE TRANSACTION": (lambda c: c.execute("PREPARE TRANSACTION 'rogue'"), ROLLED_BACK, False),
    # The connection (store.db.Connection) refuses them inside either pass.
    "commit()": (
        lambda c: c.commit(),
        "called conn.commit() in the batch's transaction (refused)",
        False,
    ),
    "rollback()": (
        lambda c: c.rollback(),
        "called conn.rollback() in the batch's transaction (refused)",
        False,
    ),
}


def _customer_event(conn: psycopg.Connection[Any], customer_id: str, event_type: str) -> int:
    return store_event(
        conn, event_type=event_type, payload={"data": {"object": {"id": customer_id}}}
    )


def _applied(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """customer id → number of outbox messages its creation queued (one per applied change)."""
    rows = conn.execute(
        "SELECT c.customer_id, count(o.id) FROM customers c"
        " LEFT JOIN outbox_messages o ON o.payload->>'customer_id' = c.customer_id"
        " GROUP BY c.customer_id"
    ).fetchall()
    return {customer_id: int(count) for customer_id, count in rows}


@pytest.mark.parametrize("takes_it_in", ["fast pass", "careful pass", "both passes"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_handler_that_takes_the_transaction_fails_alone_and_batch_mates_apply_once(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    case: str,
    takes_it_in: str,
) -> None:
    takes_it, message, own_write_survives = CASES[case]
    calls = {"rogue": 0, "flaky": 0}

    def rogue(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        calls["rogue"] += 1
        examples.stripe_customer_created(c, event)  # its own write, then it takes over
        first_run = calls["rogue"] == 1
        if takes_it_in == "both passes" or (takes_it_in == "fast pass") == first_run:
            takes_it(c)

    def flaky(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        calls["flaky"] += 1
        if takes_it_in == "careful pass" and calls["flaky"] == 1:
            raise RuntimeError("fails in the fast pass only, sending the batch the careful way")
        examples.stripe_customer_created(c, event)

    registry[("stripe", "rogue.event")] = rogue
    registry[("stripe", "flaky.event")] = flaky
    before = [_customer_event(conn, f"cus_{i}", "customer.created") for i in range(2)]
    rogue_id = _customer_event(conn, "cus_rogue", "rogue.event")
    after = [
        _customer_event(conn, "cus_flaky", "flaky.event"),
        _customer_event(conn, "cus_after", "customer.created"),
    ]

    assert failures(invoke(processor, sqs_event_for([*before, rogue_id, *after]))) == []

    mates = ["cus_0", "cus_1", "cus_flaky", "cus_after"]
    rogue_row = row(conn, rogue_id)
    if takes_it_in == "fast pass":  # the careful pass ran it as an ordinary handler
        assert rogue_row["status"] == "processed"
        assert _applied(conn) == dict.fromkeys([*mates, "cus_rogue"], 1)
    else:
        assert (rogue_row["status"], rogue_row["attempts"]) == ("dead_letter", 1)
        assert rogue_row["error_kind"] == "transaction_control"
        assert rogue_row["last_error"] == f"handler {message}"
        expected = dict.fromkeys(mates, 1)
        if own_write_survives:
            expected["cus_rogue"] = 1
        assert _applied(conn) == expected
    for row_id in (*before, *after):
        assert (row(conn, row_id)["status"], row(conn, row_id)["attempts"]) == ("processed", 1)
    # Nothing is left open or prepared behind the batch.
    assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)
    assert conn.execute(
        "SELECT count(*) FROM webhook_events WHERE status = 'processing'"
    ).fetchone() == (0,)


@pytest.mark.parametrize("call", ["commit", "rollback"])
def test_conn_commit_and_rollback_in_the_fast_pass_are_refused_before_reaching_the_server(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    log_output: Any,
    call: str,
) -> None:
    """The fast pass opens its transaction with a BEGIN of its own (no ``conn.transaction()``):
    the connection itself refuses the call. A handler that lets the refusal propagate sends the
    batch the careful way for that reason (not the guard's), and is dead-lettered there as
    before; one that swallows it changed nothing, and the batch commits in the fast pass."""
    refusals: list[str] = []

    def calls_it(swallow: bool) -> Callable[[psycopg.Connection[Any], LeasedEvent], None]:
        def handler(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
            examples.stripe_customer_created(c, event)
            try:
                getattr(c, call)()
            except db.CommitRefused as refused:
                refusals.append(refused.call)
                if not swallow:
                    raise

        return handler

    registry[("stripe", "swallows.event")] = calls_it(swallow=True)
    mates = [_customer_event(conn, f"cus_{i}", "customer.created") for i in range(2)]
    swallows = _customer_event(conn, "cus_swallows", "swallows.event")

    assert failures(invoke(processor, sqs_event_for([mates[0], swallows, mates[1]]))) == []

    assert refusals == [call]
    assert fast_pass_log_reasons(log_output.getvalue()) == []
    assert [row(conn, i)["status"] for i in (*mates, swallows)] == ["processed"] * 3
    xids = conn.execute("SELECT DISTINCT xmin::text FROM customers").fetchall()
    assert len(xids) == 1  # one transaction: the refused call sent nothing

    registry[("stripe", "raises.event")] = calls_it(swallow=False)
    refusals.clear()
    mates = [_customer_event(conn, f"cus_{i}", "customer.created") for i in range(2, 4)]
    raises = _customer_event(conn, "cus_raises", "raises.event")

    assert failures(invoke(processor, sqs_event_for([mates[0], raises, mates[1]]))) == []

    assert refusals == [call, call]  # refused in the fast pass, then in the careful pass
    assert fast_pass_log_reasons(log_output.getvalue()) == ["CommitRefused"]
    raised_row = row(conn, raises)
    assert (raised_row["status"], raised_row["attempts"]) == ("dead_letter", 1)
    assert raised_row["error_kind"] == "transaction_control"
    assert raised_row["last_error"] == (
        f"handler called conn.{call}() in the batch's transaction (refused)"
    )
    assert [row(conn, i)["status"] for i in mates] == ["processed", "processed"]
    assert _applied(conn) == dict.fromkeys(["cus_0", "cus_1", "cus_swallows", "cus_2", "cus_3"], 1)


def test_the_first_event_of_a_batch_ending_the_transaction_leaves_the_rest_intact(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    def rolls_back_first(c: psycopg.Connection[Any], _event: LeasedEvent) -> None:
        c.execute("ROLLBACK")

    registry[("stripe", "rogue.event")] = rolls_back_first
    rogue_id = _customer_event(conn, "cus_rogue", "rogue.event")
    mates = [_customer_event(conn, f"cus_{i}", "customer.created") for i in range(3)]

    assert failures(invoke(processor, sqs_event_for([rogue_id, *mates]))) == []

    assert row(conn, rogue_id)["status"] == "dead_letter"
    assert _applied(conn) == {"cus_0": 1, "cus_1": 1, "cus_2": 1}
    assert [row(conn, i)["status"] for i in mates] == ["processed"] * 3


@pytest.mark.parametrize("reads_first", [False, True])
def test_a_handler_with_savepoints_of_its_own_is_not_taken_for_one_that_takes_the_transaction(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    log_output: Any,
    reads_first: bool,
) -> None:
    """Nested ``conn.transaction()`` and savepoints the handler names itself are allowed: the
    guard must not send the batch the careful way, nor fail the event. ``reads_first``: with
    every answer read, psycopg knows the session's status only from the last sync, which in the
    fast pass came before its BEGIN; the nested block must still be a savepoint."""

    def careful_handler(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        if reads_first:
            c.execute("SELECT 1").fetchone()
        with c.transaction():
            examples.stripe_customer_created(c, event)
        c.execute("SAVEPOINT mine")
        c.execute(
            "INSERT INTO customers (provider, customer_id, status) VALUES ('x', 'y', 'active')"
        )
        c.execute("ROLLBACK TO SAVEPOINT mine")
        c.execute("RELEASE SAVEPOINT mine")

    registry[("stripe", "nested.event")] = careful_handler
    ids = [_customer_event(conn, f"cus_{i}", "nested.event") for i in range(3)]

    assert failures(invoke(processor, sqs_event_for(ids))) == []

    assert fast_pass_log_reasons(log_output.getvalue()) == []
    assert [row(conn, i)["status"] for i in ids] == ["processed"] * 3
    assert _applied(conn) == {"cus_0": 1, "cus_1": 1, "cus_2": 1}


def test_a_savepoint_one_handler_leaves_open_cannot_undo_its_writes_from_the_next(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    """In the fast pass nothing releases a handler's savepoints: the next handler could roll
    back to one and undo the writes made after it, which would then be marked processed."""

    def leaves_a_savepoint_open(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        c.execute("SAVEPOINT left_open")
        examples.stripe_customer_created(c, event)

    def rolls_back_to_it(c: psycopg.Connection[Any], _event: LeasedEvent) -> None:
        c.execute("ROLLBACK TO SAVEPOINT left_open")

    registry[("stripe", "opens.event")] = leaves_a_savepoint_open
    registry[("stripe", "rewinds.event")] = rolls_back_to_it
    opener = _customer_event(conn, "cus_open", "opens.event")
    rewinder = _customer_event(conn, "cus_rewind", "rewinds.event")

    assert failures(invoke(processor, sqs_event_for([opener, rewinder]))) == []

    assert _applied(conn) == {"cus_open": 1}
    assert row(conn, opener)["status"] == "processed"
    # In the careful pass the savepoint around the first handler, released, took the handler's
    # own with it: the second one's ROLLBACK TO is an ordinary failing statement.
    rewound = row(conn, rewinder)
    assert (rewound["status"], rewound["error_kind"], rewound["last_error"]) == (
        "failed",
        "store_error",
        "InvalidSavepointSpecification",
    )
