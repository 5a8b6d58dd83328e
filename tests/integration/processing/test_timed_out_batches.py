"""A handler that runs its invocation out of time charges no one but itself.

Issue 14, suspected item 3 (confirmed): when one handler keeps an invocation busy until Lambda
kills it, nothing of the batch commits and every lease of the batch expires; the sweeper turns
each into a failed attempt. SQS and the sweeper bring the same batch back, the same handler
hangs again, and after MAX_ATTEMPTS rounds every event of the batch was dead-lettered although
only one ever failed. Now a row whose last attempt ended in an expired lease is a suspect: the
processor hands its lease back at once and runs suspects one at a time, each leased just before
its handler starts and committed on its own, fewest attempts first. A kill then charges only
the event that was running.
"""

from __future__ import annotations

import contextlib
import io
import json
from types import ModuleType
from typing import Any

import psycopg

from tests.integration.processing.helpers import (
    emitted_metrics,
    invoke,
    row,
    sqs_event_for,
    store_event,
)
from webhook_inbox.store import db, inbox_upkeep
from webhook_inbox.store.inbox import LeasedEvent

MAX_ATTEMPTS = 3  # the processor fixture's


class InvocationKilled(BaseException):
    """What Lambda does at the timeout: the invocation stops where it is, nothing more runs
    (a BaseException, so no ``except Exception`` in the processor can handle it)."""


def _hangs(_conn: psycopg.Connection[Any], _event: LeasedEvent) -> None:
    raise InvocationKilled


def _customers(conn: psycopg.Connection[Any], count: int) -> list[int]:
    return [
        store_event(
            conn, event_type="customer.created", payload={"data": {"object": {"id": f"cus_{n}"}}}
        )
        for n in range(count)
    ]


def _invoke_until_killed(processor: ModuleType, ids: list[int]) -> None:
    """One invocation; if the culprit's handler kills it, the environment goes with it."""
    with contextlib.suppress(InvocationKilled):
        invoke(processor, sqs_event_for(ids))
    db.discard_connection()  # the execution environment is gone with its connection


def _leases_run_out_and_the_sweeper_recovers_them(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "UPDATE webhook_events SET lease_expires_at = now() - interval '1 second'"
        " WHERE status = 'processing'"
    )
    inbox_upkeep.expire_leases(conn, max_attempts=MAX_ATTEMPTS, limit=100)


def _open(conn: psycopg.Connection[Any], ids: list[int]) -> list[int]:
    terminal = {"processed", "dead_letter", "ignored"}
    return [i for i in ids if row(conn, i)["status"] not in terminal]


def test_a_handler_that_keeps_timing_out_dead_letters_alone(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    registry[("stripe", "invoice.paid")] = _hangs
    healthy = _customers(conn, 4)
    culprit = store_event(conn, event_type="invoice.paid", payload={})
    batch = [*healthy[:2], culprit, *healthy[2:]]  # the culprit in the middle of its batch

    rounds = 0
    while _open(conn, batch) and rounds < MAX_ATTEMPTS + 2:
        rounds += 1
        # SQS redelivers the batch (or the sweeper re-sends its rows); the culprit hangs again.
        _invoke_until_killed(processor, _open(conn, batch))
        _leases_run_out_and_the_sweeper_recovers_them(conn)

    # Before: all five dead-lettered after three rounds, the healthy ones with 3 attempts each.
    assert {i: row(conn, i)["status"] for i in healthy} == dict.fromkeys(healthy, "processed")
    assert row(conn, culprit)["status"] == "dead_letter"
    assert row(conn, culprit)["attempts"] == MAX_ATTEMPTS
    assert max(row(conn, i)["attempts"] for i in healthy) <= 2
    customers = {r[0] for r in conn.execute("SELECT customer_id FROM customers").fetchall()}
    assert customers == {f"cus_{n}" for n in range(4)}


def test_suspects_run_after_the_rest_of_their_batch_has_committed(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    registry[("stripe", "invoice.paid")] = _hangs
    (suspect_mate,) = _customers(conn, 1)
    culprit = store_event(conn, event_type="invoice.paid", payload={})
    fresh = store_event(
        conn, event_type="customer.created", payload={"data": {"object": {"id": "cus_fresh"}}}
    )
    # A first round killed by the culprit: both it and its batch-mate come back as suspects.
    _invoke_until_killed(processor, [culprit, suspect_mate])
    _leases_run_out_and_the_sweeper_recovers_them(conn)
    assert row(conn, suspect_mate)["error_kind"] == "lease_expired"

    # They arrive again together with an event never tried: the fresh one commits first, then
    # the suspects one by one (the batch-mate, then the culprit, which hangs again).
    _invoke_until_killed(processor, [culprit, suspect_mate, fresh])

    assert row(conn, fresh)["status"] == "processed"
    assert row(conn, suspect_mate)["status"] == "processed"
    assert (row(conn, culprit)["status"], row(conn, culprit)["attempts"]) == ("processing", 2)


def test_a_batch_taken_back_from_expired_leases_before_any_sweep_runs_as_suspects(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    """SQS may bring a killed batch back before a sweep has expired its leases (the sweeper is
    failing, or late): the processor then takes each row over from its expired lease itself.
    Such a row's previous attempt ended without an outcome just the same, so it is a suspect."""
    registry[("stripe", "invoice.paid")] = _hangs
    healthy = _customers(conn, 4)
    culprit = store_event(conn, event_type="invoice.paid", payload={})
    batch = [*healthy[:2], culprit, *healthy[2:]]

    for _ in range(3):
        _invoke_until_killed(processor, _open(conn, batch))
        conn.execute(  # the leases run out; no sweep runs before SQS redelivers
            "UPDATE webhook_events SET lease_expires_at = now() - interval '1 second'"
            " WHERE status = 'processing'"
        )

    # Before: every round leased all five into one batch again, and the culprit killed it.
    assert {i: row(conn, i)["status"] for i in healthy} == dict.fromkeys(healthy, "processed")
    assert row(conn, culprit)["error_kind"] == "lease_expired"


def test_a_lease_taken_over_with_its_attempts_spent_dead_letters_without_running(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    """Issue 24, item 4: SQS redelivers a row whose last lease (its MAX_ATTEMPTS-th attempt)
    expired before any sweep ran. The takeover must do what the sweeper's expiry does:
    dead-letter it as lease_expired, not run the handler a fourth time."""
    attempts_seen: list[int] = []

    def records_attempts(_conn: psycopg.Connection[Any], event: LeasedEvent) -> None:
        attempts_seen.append(event.attempts)

    registry[("stripe", "invoice.paid")] = records_attempts
    spent = store_event(conn, event_type="invoice.paid", payload={})
    one_left = store_event(conn, event_type="invoice.paid", payload={})
    conn.execute(  # both were leased by a worker that died; `spent` on its last attempt
        "UPDATE webhook_events SET status = 'processing', lease_owner = 'killed-worker',"
        " lease_expires_at = now() - interval '1 second',"
        " attempts = CASE WHEN id = %s THEN %s ELSE %s END WHERE id IN (%s, %s)",
        (spent, MAX_ATTEMPTS, MAX_ATTEMPTS - 1, spent, one_left),
    )

    invoke(processor, sqs_event_for([spent, one_left]))

    # Before: the handler ran with attempts=4 and the row ended processed.
    spent_row = row(conn, spent)
    assert (spent_row["status"], spent_row["attempts"]) == ("dead_letter", MAX_ATTEMPTS)
    assert spent_row["error_kind"] == "lease_expired"
    assert spent_row["last_error"] == "lease held by killed-worker expired"
    assert spent_row["lease_owner"] is None
    # The row with one attempt left is taken over and runs its last attempt, as after a sweep.
    assert attempts_seen == [MAX_ATTEMPTS]
    assert (row(conn, one_left)["status"], row(conn, one_left)["attempts"]) == (
        "processed",
        MAX_ATTEMPTS,
    )


def test_a_dead_letter_on_takeover_is_logged_and_counted_like_every_other(
    processor: ModuleType, conn: psycopg.Connection[Any], log_output: io.StringIO
) -> None:
    """EventsDeadLetteredAlarm (a SUM of DeadLettered) covers every dead letter (RUNBOOK): the
    row the lease dead-letters must reach the batch's results, its line and its count."""
    spent = store_event(conn, event_type="invoice.paid", payload={})
    fresh = store_event(conn, event_type="invoice.paid", payload={})
    conn.execute(
        "UPDATE webhook_events SET status = 'processing', lease_owner = 'killed-worker',"
        " lease_expires_at = now() - interval '1 second', attempts = %s WHERE id = %s",
        (MAX_ATTEMPTS, spent),
    )

    invoke(processor, sqs_event_for([spent, fresh]))

    assert row(conn, spent)["status"] == "dead_letter"
    output = log_output.getvalue()
    # Before: only an INFO "event not claimable, acknowledged" line, and no DeadLettered value.
    assert emitted_metrics(output)["DeadLettered"] == [1]
    lines = [json.loads(line) for line in output.splitlines()]
    [dead_line] = [line for line in lines if line["message"] == "dead_letter"]
    assert dead_line["level"] == "WARNING"
    assert (dead_line["row_id"], dead_line["error_kind"]) == (spent, "lease_expired")
    assert dead_line["attempt"] == MAX_ATTEMPTS
    assert not [line for line in lines if line.get("row_id") == spent and "level" not in line]
    [summary] = [line for line in lines if line["message"] == "batch"]
    assert (summary["leased"], summary["redelivered"]) == (2, 0)
