"""Pauses and the circuit breaker: what a pause holds, what a resume releases, and a handler key
whose circuit opens, is probed, and closes by itself."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.helpers import (
    Downstream,
    due_rows,
    invoke,
    row,
    sqs_event_for,
    store_event,
)
from webhook_inbox.errors import RetryableEventError
from webhook_inbox.store import inbox, inbox_upkeep, pauses

INFINITY = "infinity"


def _held(conn: psycopg.Connection[Any]) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM webhook_events WHERE available_at = '9999-01-01 00:00:00+00' ORDER BY id"
    ).fetchall()
    return [r[0] for r in rows]


def _store(conn: psycopg.Connection[Any], event_type: str, n: int = 1) -> list[int]:
    return [store_event(conn, event_type=event_type, payload={"n": i}) for i in range(n)]


def test_a_paused_provider_is_held_without_an_attempt_and_released_in_arrival_order(
    conn: psycopg.Connection[Any], processor: ModuleType, registry: dict[Any, Any]
) -> None:
    seen: list[int] = []
    registry[("stripe", "invoice.paid")] = lambda c, event: seen.append(event.id)
    assert pauses.pause(conn, "stripe", "*", reason="vendor incident", by="ops@example") is not None
    # Paused twice: nothing changes, the first pause stands.
    assert pauses.pause(conn, "stripe", "*", reason="again", by="someone") is None
    ids = _store(conn, "invoice.paid", 3)

    assert invoke(processor, sqs_event_for(ids))["batchItemFailures"] == []
    assert seen == []
    assert _held(conn) == ids
    held = row(conn, ids[0])
    assert (held["status"], held["attempts"], held["lease_owner"]) == ("received", 0, None)
    # Held rows are due never: the sweeper's wake-up read passes them by.
    assert (
        inbox_upkeep.claim_due_for_enqueue(conn, limit=100, stale_seconds=1, stale_limit=100) == []
    )
    [paused] = pauses.active_pauses(conn)
    assert (paused.provider, paused.event_type, paused.paused_by, paused.held) == (
        "stripe", "*", "ops@example", 3,
    )  # fmt: skip

    assert pauses.resume(conn, "stripe", "*", by="ops@example") is not None
    assert pauses.release_resumed(conn) == 3
    assert _held(conn) == []
    assert pauses.active_pauses(conn) == []
    due = conn.execute(
        "SELECT id FROM webhook_events WHERE available_at <= now() ORDER BY available_at, id"
    ).fetchall()
    assert [r[0] for r in due] == ids  # due at arrival: woken oldest first
    invoke(processor, sqs_event_for(ids))
    assert seen == ids
    assert pauses.resume(conn, "stripe", "*", by="ops@example") is None  # not paused any more


def test_a_pause_of_a_pattern_holds_only_the_types_it_matches(
    conn: psycopg.Connection[Any], processor: ModuleType, registry: dict[Any, Any]
) -> None:
    registry[("stripe", "invoice.paid")] = lambda c, event: None
    registry[("stripe", "customer.created")] = lambda c, event: None
    pauses.pause(conn, "stripe", "invoice.*", reason="billing migration", by="ops")
    invoice, customer = _store(conn, "invoice.paid")[0], _store(conn, "customer.created")[0]
    invoke(processor, sqs_event_for([invoice, customer]))
    assert _held(conn) == [invoice]
    assert row(conn, customer)["status"] == "processed"


@pytest.mark.parametrize("key", ["", "*.paid", "in*voice"])
def test_a_key_that_is_not_a_type_or_a_prefix_is_refused(
    conn: psycopg.Connection[Any], key: str
) -> None:
    from webhook_inbox.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="cannot pause"):
        pauses.pause(conn, "stripe", key, reason="r", by="o")
    assert pauses.active_pauses(conn) == []


def _circuit(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    cur = conn.execute("SELECT * FROM handler_pauses WHERE circuit AND resumed_at IS NULL")
    found = cur.fetchone()
    return (
        None
        if found is None
        else dict(zip([c.name for c in cur.description or ()], found, strict=True))
    )


def _make_due(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "UPDATE webhook_events SET available_at = now() - interval '1 second'"
        " WHERE status = 'failed' AND available_at <> '9999-01-01 00:00:00+00'"
    )


def test_a_run_of_failures_opens_the_circuit_a_probe_closes_it(
    conn: psycopg.Connection[Any],
    processor: ModuleType,
    registry: dict[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CIRCUIT_FAILURE_THRESHOLD", "3")
    downstream = Downstream()
    registry[("stripe", "invoice.paid")] = downstream.handler
    registry[("stripe", "customer.created")] = lambda c, event: None
    first = _store(conn, "invoice.paid", 3)
    invoke(processor, sqs_event_for(first))
    circuit = _circuit(conn)
    assert circuit is not None
    assert (circuit["event_type"], circuit["paused_by"]) == ("invoice.paid", "circuit breaker")
    assert circuit["reason"] == "circuit open: 3 consecutive failures"
    assert circuit["last_error"] == "downstream answered 503"
    assert [row(conn, i)["attempts"] for i in first] == [1, 1, 1]

    # While it is open: the key's events are held, with no attempt; other keys run.
    later = _store(conn, "invoice.paid", 2)
    other = _store(conn, "customer.created")[0]
    _make_due(conn)
    invoke(processor, sqs_event_for([*first, *later, other]))
    assert _held(conn) == [*first, *later]
    assert [row(conn, i)["attempts"] for i in first + later] == [1, 1, 1, 0, 0]
    assert row(conn, other)["status"] == "processed"

    # A probe that fails: one held event let through (fewest attempts, then oldest), held again.
    conn.execute("UPDATE handler_pauses SET probe_at = now() WHERE circuit")
    assert pauses.send_probes(conn, limit=10, max_cooldown_seconds=900) == 1
    assert due_rows(conn) == [later[0]]
    invoke(processor, sqs_event_for([later[0]]))
    assert row(conn, later[0])["attempts"] == 1
    failed_probe = _circuit(conn)
    assert failed_probe is not None
    assert (failed_probe["probes"], failed_probe["cooldown_seconds"]) == (1, 120)  # doubled
    assert failed_probe["probe_event_id"] is None
    _make_due(conn)
    invoke(processor, sqs_event_for([later[0]]))
    assert later[0] in _held(conn)  # a failed probe waits with the rest

    # The downstream is back: the next probe succeeds, the circuit closes, the rest come back.
    downstream.up = True
    conn.execute("UPDATE handler_pauses SET probe_at = now() WHERE circuit")
    assert pauses.send_probes(conn, limit=10, max_cooldown_seconds=900) == 1
    probe = due_rows(conn)
    invoke(processor, sqs_event_for(probe))
    assert _circuit(conn) is None
    assert conn.execute("SELECT count(*) FROM handler_failures").fetchone() == (0,)
    assert pauses.release_resumed(conn) == 4
    rest = due_rows(conn)
    assert rest == sorted(set(first + later) - set(probe))  # arrival order
    invoke(processor, sqs_event_for(rest))
    assert downstream.applied == probe + rest
    assert conn.execute(
        "SELECT count(*) FROM webhook_events WHERE status <> 'processed'"
    ).fetchone() == (0,)


def test_failures_beside_successes_are_poison_not_an_outage(
    conn: psycopg.Connection[Any],
    processor: ModuleType,
    registry: dict[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CIRCUIT_FAILURE_THRESHOLD", "2")

    def picky(conn: Any, event: Any) -> None:
        if event.payload["n"] % 2:
            raise RetryableEventError("this one never works")

    registry[("stripe", "invoice.paid")] = picky
    for _ in range(3):
        ids = _store(conn, "invoice.paid", 4)
        invoke(processor, sqs_event_for(ids))
    assert _circuit(conn) is None  # each chunk had a success: no run of failures
    assert _held(conn) == []


def test_a_first_failure_keeps_the_retry_schedule(
    conn: psycopg.Connection[Any], processor: ModuleType, registry: dict[Any, Any]
) -> None:
    downstream = Downstream()
    registry[("stripe", "invoice.paid")] = downstream.handler
    [row_id] = _store(conn, "invoice.paid")
    invoke(processor, sqs_event_for([row_id]))
    failed = row(conn, row_id)
    # Retried on the usual backoff (seconds away), not held: one failure says nothing yet.
    assert failed["status"] == "failed"
    assert failed["available_at"].year < 9999
    assert _circuit(conn) is None
    # Failing again with no success between: the key gets a circuit holding what failed.
    _make_due(conn)
    invoke(processor, sqs_event_for([row_id]))
    circuit = _circuit(conn)
    assert circuit is not None
    assert (circuit["holds_new"], circuit["reason"]) == (False, "failing: 2 consecutive failures")
    _make_due(conn)
    invoke(processor, sqs_event_for([row_id]))
    assert _held(conn) == [row_id]
    assert row(conn, row_id)["attempts"] == 2
    # Quiet for the window, with no new event to test the handler: resumed, and tried again.
    conn.execute("UPDATE handler_failures SET last_failure_at = now() - interval '11 minutes'")
    assert pauses.expire_quiet_circuits(conn, window_seconds=600) == 1
    assert pauses.release_resumed(conn) == 1
    downstream.up = True
    invoke(processor, sqs_event_for([row_id]))
    assert row(conn, row_id)["status"] == "processed"


def test_a_paused_row_taken_over_with_its_attempts_spent_is_a_dead_letter_not_held(
    conn: psycopg.Connection[Any],
) -> None:
    [row_id] = _store(conn, "invoice.paid")
    conn.execute(
        "UPDATE webhook_events SET status = 'processing', attempts = 3, lease_owner = 'gone',"
        " lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (row_id,),
    )
    pauses.pause(conn, "stripe", "*", reason="incident", by="ops")
    leases = inbox.take_leases(conn, [row_id], owner="w", lease_seconds=30, max_attempts=3)
    assert ([e.id for e in leases.dead_lettered], leases.held) == ([row_id], [])
    assert row(conn, row_id)["status"] == "dead_letter"
