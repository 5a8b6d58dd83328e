"""Per-handler pacing: a rate (events per second, with a burst) and a concurrency per handler key,
held across every processor by the database (:mod:`webhook_inbox.store.pacing`).

The application names its limits beside its handlers (``PACING`` in
``webhook_inbox_app.handlers``, keyed like ``HANDLERS``)::

    PACING = {("stripe", "invoice.*"): Pacing(per_second=10, burst=20, concurrency=4)}

After a chunk is leased, its events of paced keys are decided in one transaction: their keys'
rows locked, their state read, each event admitted or turned away. Turned away, an event is
handed back with its attempt unspent, due at its own moment, and woken then (SQS's delay, else
the sweeper): it is ``deferred``, not failed, and the circuit breaker does not count it.

* **Rate**: a generic cell rate algorithm. Each admission takes the key's next slot, ``1 /
  per_second`` after the previous one; up to ``burst`` events may run ahead of the schedule. An
  event that would run too far ahead reserves its slot and is deferred to it; when it comes back
  it runs on that reservation, so a waiting event never loses its place to later ones.
* **Concurrency**: the key's events running now (admitted, their lease not over) are counted;
  when ``concurrency`` of them run, the next waits ``CONCURRENCY_WAIT_S`` (longer the further back
  in line), keeping its rate slot. A finished event frees its place after its batch commits; a
  crashed one when its lease would have expired.

A chunk with no paced event costs nothing here: no statement, one set lookup per event (and a
handler key lookup for the providers that have a paced key).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.processing import handlers
from webhook_inbox.processing.passes import EventResult
from webhook_inbox.store import pacing as store
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox.store.pacing import Admission, Key, PacingState
from webhook_inbox.store.store_errors import translate

# A key at its concurrency: how long the next event waits before it asks again, times its place
# in line (1 for the first ``concurrency`` waiting, 2 for the next, ...), at most the cap.
CONCURRENCY_WAIT_S = 1.0
MAX_CONCURRENCY_WAIT_S = 30.0


@dataclass(frozen=True)
class Pacing:
    """A handler key's limits; either may be left out (None: no limit)."""

    per_second: float | None = None
    burst: int = 1  # events that may run ahead of the rate's schedule at once
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.per_second is None and self.concurrency is None:
            raise ConfigurationError("Pacing needs per_second, concurrency or both")
        if self.per_second is not None and not (
            math.isfinite(self.per_second) and self.per_second > 0
        ):
            raise ConfigurationError(f"Pacing per_second must be above 0, not {self.per_second}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, int) or self.burst < 1:
            raise ConfigurationError(f"Pacing burst must be a whole number ≥ 1, not {self.burst}")
        if self.concurrency is not None and (
            isinstance(self.concurrency, bool)
            or not isinstance(self.concurrency, int)
            or self.concurrency < 1
        ):
            raise ConfigurationError(
                f"Pacing concurrency must be a whole number ≥ 1, not {self.concurrency}"
            )


LIMITS: dict[Key, Pacing] = {}
_PROVIDERS: set[str] = set()  # providers with a paced key: every other event skips the lookup


def install(limits: Mapping[Key, Pacing]) -> None:
    """Take the application's ``PACING`` map; each key must be a handler key of ``HANDLERS``."""
    for key, limit in limits.items():
        if key not in handlers.HANDLERS:
            raise ConfigurationError(
                f"pacing key {key} is not a handler key: name it exactly as in HANDLERS"
            )
        if not isinstance(limit, Pacing):
            raise ConfigurationError(f"pacing key {key}: give a Pacing(...), not {limit!r}")
    LIMITS.clear()
    LIMITS.update(limits)
    _PROVIDERS.clear()
    _PROVIDERS.update(provider for provider, _ in LIMITS)


def limit_key(event: LeasedEvent) -> Key | None:
    """The paced handler key that takes ``event``, or None."""
    if event.provider not in _PROVIDERS:
        return None
    key_type = handlers.key_for(event.provider, event.event_type)
    key = (event.provider, key_type) if key_type is not None else None
    return key if key in LIMITS else None


# --- deciding (pure: the state read, the limits, the clock in; the decisions out) -------------


@dataclass
class Decisions:
    admitted: list[LeasedEvent] = field(default_factory=list)
    deferred: dict[int, datetime] = field(default_factory=dict)  # row id → due at
    admissions: list[Admission] = field(default_factory=list)  # to store
    next_slot_at: dict[Key, datetime] = field(default_factory=dict)  # keys whose slot moved
    # Admitted rows that have an admission row (a place taken, or a reservation now used): it
    # goes once the chunk is done.
    to_finish: list[int] = field(default_factory=list)


def decide(
    paced: Sequence[tuple[LeasedEvent, Key]], limits: Mapping[Key, Pacing], state: PacingState
) -> Decisions:
    """Admit or defer each paced event, in the order given (the lease's: by row id)."""
    now = state.now
    chunk_ids = {event.id for event, _ in paced}
    earlier = {a.event_row_id: a for a in state.admissions if a.event_row_id in chunk_ids}
    running: dict[Key, int] = {}
    for a in state.admissions:
        if a.event_row_id not in chunk_ids and a.running_until is not None:
            key = (a.provider, a.handler_key)
            running[key] = running.get(key, 0) + 1
    next_slot = dict(state.next_slot_at)
    waiting: dict[Key, int] = {}
    out = Decisions()
    for event, key in paced:
        limit = limits[key]
        slot_at = _rate_slot(limit, key, earlier.get(event.id), next_slot, now)
        if slot_at > now:  # reserved: comes back at its slot
            out.deferred[event.id] = slot_at
            out.admissions.append(Admission(event.id, *key, slot_at, None))
        elif limit.concurrency is not None and running.get(key, 0) >= limit.concurrency:
            place = waiting.get(key, 0)
            waiting[key] = place + 1
            wait_s = min(
                CONCURRENCY_WAIT_S * (1 + place // limit.concurrency), MAX_CONCURRENCY_WAIT_S
            )
            out.deferred[event.id] = now + timedelta(seconds=wait_s)
            out.admissions.append(Admission(event.id, *key, slot_at, None))  # keeps its slot
        else:
            out.admitted.append(event)
            if limit.concurrency is not None:
                running[key] = running.get(key, 0) + 1
                out.admissions.append(Admission(event.id, *key, slot_at, event.lease_expires_at))
            if limit.concurrency is not None or event.id in earlier:
                out.to_finish.append(event.id)
    out.next_slot_at = {k: v for k, v in next_slot.items() if v != state.next_slot_at.get(k)}
    return out


def _rate_slot(
    limit: Pacing,
    key: Key,
    earlier: Admission | None,
    next_slot: dict[Key, datetime],
    now: datetime,
) -> datetime:
    """When the event may run by the rate: its reserved slot, else the key's next (taken)."""
    if earlier is not None:
        return earlier.slot_at  # reserved when it was deferred (or admitted, then handed back)
    if limit.per_second is None:
        return now
    interval = timedelta(seconds=1 / limit.per_second)
    scheduled = max(next_slot[key], now)
    next_slot[key] = scheduled + interval
    # Up to burst - 1 intervals ahead of the schedule may run at once.
    return max(scheduled - interval * (limit.burst - 1), now)


# --- the processor's step ---------------------------------------------------------------------


@dataclass(frozen=True)
class Paced:
    leased: list[LeasedEvent]  # what runs now: the unpaced and the admitted, in lease order
    deferred: list[EventResult]  # outcome "deferred" (or "lease_lost"), with their wake-up delay
    finish_ids: list[int]  # admitted rows holding a place or a reservation: freed after the chunk


def pace(conn: psycopg.Connection[Any], leased: list[LeasedEvent], *, owner: str) -> Paced:
    """Decide the chunk's paced events in one transaction; the rest pass untouched."""
    if not LIMITS:
        return Paced(leased, [], [])
    paced = [(event, key) for event in leased if (key := limit_key(event)) is not None]
    if not paced:
        return Paced(leased, [], [])
    with translate(), conn.transaction():
        state = store.lock_and_read(conn, [key for _, key in paced], [e.id for e, _ in paced])
        decisions = decide(paced, LIMITS, state)
        handed_back = store.write(
            conn,
            admissions=decisions.admissions,
            next_slot_at=decisions.next_slot_at,
            deferred=decisions.deferred,
            owner=owner,
        )
    admitted = {event.id for event in decisions.admitted}
    deferred = [
        EventResult(
            event,
            "deferred",
            retry_delay_s=(decisions.deferred[event.id] - state.now).total_seconds(),
        )
        if event.id in handed_back
        else EventResult(event, "lease_lost")
        for event, _ in paced
        if event.id in decisions.deferred
    ]
    paced_ids = {event.id for event, _ in paced}
    return Paced(
        [e for e in leased if e.id not in paced_ids or e.id in admitted],
        deferred,
        sorted(decisions.to_finish),
    )


def finish(conn: psycopg.Connection[Any], row_ids: list[int]) -> None:
    """Free the admitted rows' places once their chunk is done; a failure only lets them count
    until their lease would have expired."""
    if row_ids:
        store.finish(conn, row_ids)
