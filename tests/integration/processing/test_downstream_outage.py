"""A handler's downstream down for two hours under steady traffic: nothing is dead-lettered.

The clock is simulated, never slept on: every five seconds the test delivers what arrives in
them, runs the sweeper's paused-events job once a minute (releases, probes), wakes every due row
as the queue's delayed retries and the sweeper would, runs the real processor on them, then moves
every stored timestamp five seconds into the past (the database's now() stays; the rows age).
The template's defaults throughout: eight attempts, retries 5 s apart doubling, the circuit open
at five consecutive failures, probes from one minute apart doubling to fifteen.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.helpers import (
    Downstream,
    due_rows,
    invoke,
    sqs_event_for,
    store_event,
)
from webhook_inbox.settings import CircuitSettings
from webhook_inbox.store import pauses

OUTAGE_MINUTES = 120
EVENTS_PER_MINUTE = 2
TICK_S = 5  # finer than the first retry (5 s, jittered): every retry runs when it is due
# After the downstream returns: the next probe (at most the longest cool-down) and the minute
# that releases and processes the rest.
RECOVERY_BOUND_MINUTES = CircuitSettings().circuit_max_cooldown_seconds // 60 + 2

AGED = {
    "webhook_events": (
        "available_at", "received_at", "last_delivery_at", "updated_at", "enqueued_at",
        "lease_expires_at", "processed_at",
    ),
    "handler_pauses": ("paused_at", "probe_at", "resumed_at", "released_at"),
    "handler_failures": ("first_failure_at", "last_failure_at"),
}  # fmt: skip
HELD_MARK = "9999-01-01 00:00:00+00"


def _age(conn: psycopg.Connection[Any], seconds: int) -> None:
    """Every stored moment ``seconds`` earlier: to the database, that much time went by."""
    for table, columns in AGED.items():
        moves = ", ".join(
            f"{c} = CASE WHEN {c} = '{HELD_MARK}' THEN {c}"
            f" ELSE {c} - make_interval(secs => {seconds}) END"
            for c in columns
        )
        conn.execute(f"UPDATE {table} SET {moves}")  # noqa: S608 - names from AGED, no input


def _tick(
    conn: psycopg.Connection[Any], processor: ModuleType, tick: int, arrived: list[int]
) -> None:
    """TICK_S seconds: the deliveries due in them, the sweeper once a minute, every due row
    woken (SQS's delayed retries and the sweeper's sends), then the clock moves on."""
    if tick % (60 // EVENTS_PER_MINUTE // TICK_S) == 0:
        arrived.append(store_event(conn, event_type="invoice.paid", payload={"tick": tick}))
    if tick % (60 // TICK_S) == 0:
        pauses.release_resumed(conn)
        pauses.send_probes(conn, limit=10, max_cooldown_seconds=900)
    due = due_rows(conn)
    for start in range(0, len(due), 10):
        invoke(processor, sqs_event_for(due[start : start + 10]))
    _age(conn, TICK_S)


def test_two_hours_of_downstream_outage_dead_letter_nothing(
    conn: psycopg.Connection[Any],
    processor: ModuleType,
    registry: dict[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MAX_ATTEMPTS", "8")  # the template's default
    downstream = Downstream()
    registry[("stripe", "invoice.paid")] = downstream.handler
    arrived: list[int] = []

    outage_ticks = OUTAGE_MINUTES * 60 // TICK_S
    for tick in range(outage_ticks):
        _tick(conn, processor, tick, arrived)
    downstream.up = True
    recovery = 0
    backlog: list[int] = []  # what had arrived when the probe succeeded and the circuit closed
    while len(downstream.applied) < len(arrived):
        recovery += 1
        assert recovery * TICK_S <= RECOVERY_BOUND_MINUTES * 60, "not processed in time"
        _tick(conn, processor, outage_ticks + recovery, arrived)
        if downstream.applied and not backlog:
            backlog = list(arrived)

    statuses = dict(
        conn.execute("SELECT status, count(*) FROM webhook_events GROUP BY status").fetchall()
    )
    assert statuses == {"processed": len(arrived)}  # nothing dead-lettered, nothing left
    # Every event succeeded on its last attempt: the ones before it failed.
    (most,) = conn.execute("SELECT max(attempts) - 1 FROM webhook_events").fetchone() or (None,)
    assert most is not None
    assert most <= 2  # failed attempts: the first of a run is retried once, the rest held
    # Once back: the probe that closed the circuit first, then the backlog in arrival order
    # (deliveries after the close are no longer held: they run as they come).
    probe = downstream.applied[0]
    assert [i for i in downstream.applied if i in set(backlog)] == [probe] + [
        i for i in backlog if i != probe
    ]
    print(
        f"{len(arrived)} events, {OUTAGE_MINUTES} min down: 0 dead letters, at most {most} "
        f"failed attempts per event, all processed {recovery * TICK_S} s after the downstream "
        "returned"
    )
