"""Per-handler pacing against a real PostgreSQL: a rate spreads a burst over its slots, a
concurrency holds across processors, a turned-away event spends no attempt and is woken at its
moment, and a limit on one key costs the others nothing."""

from __future__ import annotations

import io
import itertools
import json
import threading
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.conftest import RetryQueue
from tests.integration.processing.helpers import (
    due_rows,
    emitted_metrics,
    invoke,
    row,
    sqs_event_for,
    store_event,
)
from webhook_inbox.processing import pacing
from webhook_inbox.processing.pacing import Pacing
from webhook_inbox.store import inbox

KEY = ("stripe", "invoice.paid")


@pytest.fixture
def limits(
    registry: dict[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> dict[tuple[str, str], Pacing]:
    """The processor's pacing map, restored after the test."""
    monkeypatch.setattr(pacing, "LIMITS", {})
    monkeypatch.setattr(pacing, "_PROVIDERS", set())
    return pacing.LIMITS


def _pace(limits: dict[Any, Any], key: tuple[str, str], limit: Pacing) -> None:
    pacing.install({**limits, key: limit})


def _age(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Every moment the pacing and the inbox stored, ``seconds`` earlier: that much time passed."""
    shift = f"make_interval(secs => {seconds})"
    conn.execute(
        f"UPDATE webhook_events SET available_at = available_at - {shift},"  # noqa: S608
        f" enqueued_at = enqueued_at - {shift}, received_at = received_at - {shift}"
    )
    conn.execute(f"UPDATE handler_pacing SET next_slot_at = next_slot_at - {shift}")  # noqa: S608
    conn.execute(
        f"UPDATE handler_admissions SET slot_at = slot_at - {shift},"  # noqa: S608
        f" running_until = running_until - {shift}"
    )


def _due_in(conn: psycopg.Connection[Any], ids: list[int]) -> list[float]:
    rows = conn.execute(
        "SELECT extract(epoch FROM available_at) FROM webhook_events"
        " WHERE id = ANY(%s) ORDER BY id",
        (ids,),
    ).fetchall()
    return [float(r[0]) for r in rows]


def test_a_rate_spreads_a_burst_over_its_slots_without_spending_attempts(  # noqa: PLR0917
    conn: psycopg.Connection[Any],
    processor: ModuleType,
    registry: dict[Any, Any],
    limits: dict[Any, Any],
    retry_queue: RetryQueue,
    log_output: io.StringIO,
) -> None:
    ran: list[int] = []
    registry[KEY] = lambda c, event: ran.append(event.id)
    registry[("stripe", "customer.created")] = lambda c, event: ran.append(event.id)
    _pace(limits, KEY, Pacing(per_second=2))
    paced = [store_event(conn, event_type="invoice.paid", payload={"n": i}) for i in range(6)]
    other = [store_event(conn, event_type="customer.created", payload={"n": i}) for i in range(2)]

    assert invoke(processor, sqs_event_for(paced + other))["batchItemFailures"] == []
    assert ran == [paced[0], *other]  # one paced event on time, the unpaced ones untouched
    deferred = paced[1:]
    for row_id in deferred:
        stored = row(conn, row_id)
        assert (stored["status"], stored["attempts"], stored["lease_owner"]) == (
            "received",
            0,
            None,
        )
        assert stored["enqueued_at"] is not None  # its delayed wake-up is on the queue
    # Half a second apart, the first half a second after the admitted one.
    due = _due_in(conn, deferred)
    assert [round(b - a, 6) for a, b in itertools.pairwise(due)] == [0.5] * 4
    delays = {
        json.loads(e["MessageBody"])["id"]: e["DelaySeconds"] for e in retry_queue.sent_entries()
    }
    assert delays == {row_id: 2 + i // 2 for i, row_id in enumerate(deferred)}  # ceil(t) + 1
    out = log_output.getvalue()
    assert emitted_metrics(out)["Paced"] == [5]
    assert "Retried" not in emitted_metrics(out)
    assert '"deferred"' not in out  # counted, never one line per event
    assert conn.execute("SELECT count(*) FROM handler_failures").fetchone() == (0,)

    # Woken early (a duplicate message): back to the same slot, the schedule unmoved.
    schedule = conn.execute("SELECT next_slot_at FROM handler_pacing").fetchone()
    invoke(processor, sqs_event_for(deferred))
    assert ran == [paced[0], *other]
    assert _due_in(conn, deferred) == due
    assert conn.execute("SELECT next_slot_at FROM handler_pacing").fetchone() == schedule

    _age(conn, 3)  # every slot has come
    assert due_rows(conn) == deferred
    invoke(processor, sqs_event_for(deferred))
    assert ran == [paced[0], *other, *deferred]  # each on its reservation, in arrival order
    assert [row(conn, i)["attempts"] for i in deferred] == [1] * 5
    assert conn.execute("SELECT count(*) FROM handler_admissions").fetchone() == (0,)


def _lease_and_pace(
    database_url: str, ids: list[int], owner: str, barrier: threading.Barrier, out: list[Any]
) -> None:
    with psycopg.connect(database_url, autocommit=True) as own:
        leased = inbox.take_leases(own, ids, owner=owner, lease_seconds=60).leased
        barrier.wait(timeout=30)
        out.append(pacing.pace(own, leased, owner=owner))


def test_a_concurrency_holds_across_processors_racing_for_the_same_key(
    conn: psycopg.Connection[Any],
    database_url: str,
    registry: dict[Any, Any],
    limits: dict[Any, Any],
) -> None:
    registry[KEY] = lambda c, event: None
    _pace(limits, KEY, Pacing(concurrency=3))
    ids = [store_event(conn, event_type="invoice.paid", payload={"n": i}) for i in range(16)]
    workers = 4
    barrier = threading.Barrier(workers)
    outcomes: list[pacing.Paced] = []
    threads = [
        threading.Thread(
            target=_lease_and_pace,
            args=(database_url, ids[w::workers], f"worker-{w}", barrier, outcomes),
        )
        for w in range(workers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == workers

    admitted = [e.id for paced in outcomes for e in paced.leased]
    assert len(admitted) == 3  # exactly the concurrency, whichever processor won each place
    deferred = [r.event.id for paced in outcomes for r in paced.deferred]
    assert all(r.outcome == "deferred" for paced in outcomes for r in paced.deferred)
    assert sorted(admitted + deferred) == ids
    statuses = conn.execute(
        "SELECT status, attempts, count(*) FROM webhook_events GROUP BY 1, 2 ORDER BY 1"
    ).fetchall()
    assert statuses == [("processing", 1, 3), ("received", 0, 13)]

    # One of them finishes: exactly one place is free for the next event that asks.
    finished = admitted[0]
    pacing.finish(conn, [finished])
    _age(conn, 2)  # every wait is over
    with psycopg.connect(database_url, autocommit=True) as own:
        leased = inbox.take_leases(own, deferred, owner="later", lease_seconds=60).leased
        later = pacing.pace(own, leased, owner="later")
    assert len(later.leased) == 1


def test_a_crashed_run_stops_counting_when_its_lease_would_have_expired(
    conn: psycopg.Connection[Any],
    processor: ModuleType,
    registry: dict[Any, Any],
    limits: dict[Any, Any],
) -> None:
    ran: list[int] = []
    registry[KEY] = lambda c, event: ran.append(event.id)
    _pace(limits, KEY, Pacing(concurrency=1))
    crashed, waiting = (
        store_event(conn, event_type="invoice.paid", payload={"n": i}) for i in range(2)
    )
    with psycopg.connect(conn.info.dsn, autocommit=True) as other:
        leased = inbox.take_leases(other, [crashed], owner="killed", lease_seconds=30).leased
        assert pacing.pace(other, leased, owner="killed").leased  # admitted, then never finished

    invoke(processor, sqs_event_for([waiting]))
    assert ran == []  # the one place is taken
    _age(conn, 31)  # the killed invocation's lease is over
    invoke(processor, sqs_event_for([waiting]))
    assert ran == [waiting]


def test_a_limit_on_one_key_sends_no_statement_for_the_others(
    conn: psycopg.Connection[Any],
    processor: ModuleType,
    registry: dict[Any, Any],
    limits: dict[Any, Any],
) -> None:
    ran: list[int] = []
    registry[KEY] = lambda c, event: ran.append(event.id)
    registry[("github", "push")] = lambda c, event: ran.append(event.id)
    registry[("stripe", "customer.created")] = lambda c, event: ran.append(event.id)
    _pace(limits, KEY, Pacing(per_second=1, concurrency=1))
    ids = [
        store_event(conn, provider="github", event_type="push", payload={"n": i}) for i in range(5)
    ]
    ids += [store_event(conn, event_type="customer.created", payload={"n": i}) for i in range(5)]

    invoke(processor, sqs_event_for(ids))
    assert ran == ids
    # The paced key's row is created by its first paced event: none came, so none was sent.
    assert conn.execute("SELECT count(*) FROM handler_pacing").fetchone() == (0,)
