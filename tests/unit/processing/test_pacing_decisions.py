"""Pacing's decisions, given the state the database holds: the rate's slots and burst, reserved
slots kept, the concurrency counted, the configuration checked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.processing import handlers, pacing
from webhook_inbox.processing.pacing import Pacing, decide
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox.store.pacing import Admission, PacingState

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LONG_AGO = datetime(1970, 1, 1, tzinfo=UTC)
KEY = ("stripe", "invoice.*")


def _event(row_id: int) -> LeasedEvent:
    return LeasedEvent(
        id=row_id,
        provider="stripe",
        event_id=f"evt_{row_id}",
        delivery_id=None,
        event_type="invoice.paid",
        payload={},
        attempts=1,
        received_at=NOW,
        lease_expires_at=NOW + timedelta(seconds=60),
        error_kind=None,
    )


def _state(
    next_slot: datetime = LONG_AGO, admissions: list[Admission] | None = None
) -> PacingState:
    return PacingState(now=NOW, next_slot_at={KEY: next_slot}, admissions=admissions or [])


def _paced(*row_ids: int) -> list[tuple[LeasedEvent, tuple[str, str]]]:
    return [(_event(i), KEY) for i in row_ids]


def test_a_burst_runs_at_once_and_the_rest_get_the_next_slots() -> None:
    out = decide(_paced(1, 2, 3, 4, 5), {KEY: Pacing(per_second=10, burst=3)}, _state())
    assert [e.id for e in out.admitted] == [1, 2, 3]
    assert out.deferred == {4: NOW + timedelta(seconds=0.1), 5: NOW + timedelta(seconds=0.2)}
    # The key's schedule advanced by every slot handed out, reserved ones included.
    assert out.next_slot_at == {KEY: NOW + timedelta(seconds=0.5)}
    assert out.to_finish == []  # nothing stored for what runs: nothing to free after
    # Only the reservations are stored: a rate-only key keeps no row for what runs.
    assert [(a.event_row_id, a.slot_at, a.running_until) for a in out.admissions] == [
        (4, NOW + timedelta(seconds=0.1), None),
        (5, NOW + timedelta(seconds=0.2), None),
    ]


def test_a_schedule_ahead_of_now_defers_even_the_first_event() -> None:
    out = decide(_paced(7), {KEY: Pacing(per_second=2)}, _state(NOW + timedelta(seconds=3)))
    assert out.admitted == []
    assert out.deferred == {7: NOW + timedelta(seconds=3)}
    assert out.next_slot_at == {KEY: NOW + timedelta(seconds=3.5)}


def test_a_reserved_slot_is_used_without_taking_another() -> None:
    reserved = Admission(9, *KEY, NOW - timedelta(seconds=0.01), None)
    early = Admission(10, *KEY, NOW + timedelta(seconds=4), None)
    out = decide(
        _paced(9, 10),
        {KEY: Pacing(per_second=1)},
        _state(NOW + timedelta(seconds=5), [reserved, early]),
    )
    assert [e.id for e in out.admitted] == [9]
    assert out.deferred == {10: NOW + timedelta(seconds=4)}  # early: back to the same slot
    assert out.next_slot_at == {}  # nothing new was handed out
    assert out.to_finish == [9]  # its used reservation goes once its chunk is done


def test_concurrency_counts_what_runs_elsewhere_and_lines_up_the_rest() -> None:
    elsewhere = [Admission(100 + i, *KEY, NOW, NOW + timedelta(seconds=30)) for i in range(2)]
    out = decide(
        _paced(1, 2, 3, 4, 5, 6), {KEY: Pacing(concurrency=3)}, _state(admissions=elsewhere)
    )
    assert [e.id for e in out.admitted] == [1]
    waits = {i: (at - NOW).total_seconds() for i, at in out.deferred.items()}
    # Three per wait step (the concurrency), capped.
    assert waits == {2: 1.0, 3: 1.0, 4: 1.0, 5: 2.0, 6: 2.0}
    running = [a for a in out.admissions if a.running_until is not None]
    assert [(a.event_row_id, a.running_until) for a in running] == [(1, _event(1).lease_expires_at)]
    assert out.to_finish == [1]


def test_a_wait_for_a_place_keeps_the_rate_slot_it_took() -> None:
    elsewhere = [Admission(100, *KEY, NOW, NOW + timedelta(seconds=30))]
    out = decide(
        _paced(1), {KEY: Pacing(per_second=5, concurrency=1)}, _state(admissions=elsewhere)
    )
    assert out.deferred == {1: NOW + timedelta(seconds=1)}
    [kept] = out.admissions
    assert (kept.slot_at, kept.running_until) == (NOW, None)  # its slot: due by the rate already
    assert out.next_slot_at == {KEY: NOW + timedelta(seconds=0.2)}


def test_a_chunk_row_running_from_an_earlier_lease_is_not_counted_against_itself() -> None:
    mine = Admission(1, *KEY, NOW - timedelta(seconds=5), NOW + timedelta(seconds=10))
    out = decide(_paced(1), {KEY: Pacing(concurrency=1)}, _state(admissions=[mine]))
    assert [e.id for e in out.admitted] == [1]


def test_the_wait_for_a_place_is_capped() -> None:
    elsewhere = [Admission(100, *KEY, NOW, NOW + timedelta(seconds=30))]
    out = decide(_paced(*range(1, 80)), {KEY: Pacing(concurrency=1)}, _state(admissions=elsewhere))
    assert max(out.deferred.values()) == NOW + timedelta(seconds=pacing.MAX_CONCURRENCY_WAIT_S)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({}, "per_second, concurrency or both"),
        ({"per_second": 0}, "per_second must be above 0"),
        ({"per_second": float("nan")}, "per_second must be above 0"),
        ({"per_second": 1, "burst": 0}, "burst must be a whole number"),
        ({"per_second": 1, "burst": 1.5}, "burst must be a whole number"),
        ({"concurrency": 0}, "concurrency must be a whole number"),
        ({"concurrency": True}, "concurrency must be a whole number"),
    ],
)
def test_a_bad_limit_is_refused_with_what_to_change(kwargs: dict[str, float], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        Pacing(**kwargs)  # type: ignore[arg-type]


def test_a_pacing_key_must_be_a_handler_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "HANDLERS", {})
    monkeypatch.setattr(handlers, "_PATTERNS", {})
    monkeypatch.setattr(pacing, "LIMITS", {})
    monkeypatch.setattr(pacing, "_PROVIDERS", set())
    handlers.register(*KEY, lambda c, e: None)
    with pytest.raises(ConfigurationError, match="not a handler key"):
        pacing.install({("stripe", "invoice.paid"): Pacing(per_second=1)})
    with pytest.raises(ConfigurationError, match="give a Pacing"):
        pacing.install({KEY: 5})  # type: ignore[dict-item]
    assert pacing.LIMITS == {}  # nothing half-installed
    pacing.install({KEY: Pacing(per_second=1)})
    assert pacing.limit_key(_event(1)) == KEY
