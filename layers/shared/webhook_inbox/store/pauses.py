"""Data layer for pauses and circuits (handler_pauses, handler_failures) and the held rows they
decide. SQL in ``sql/pauses.sql``.

A pause holds every event its key matches: ``(provider, "*")`` all of a provider's, ``(provider,
type)`` one type, ``(provider, "invoice.*")`` a prefix. An operator pauses and resumes; the
processor opens a circuit (a pause of one handler key) after a run of consecutive failures and
closes it on the key's next success; the sweeper lets one held event through per cool-down.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.rows import class_row

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

_statement = SqlFile("pauses").statement

EVERY_TYPE = "*"
# Held rows moved back per statement on resume: each a short transaction, progress in between.
RELEASE_BATCH = 5000


@dataclass(frozen=True)
class Pause:
    provider: str
    event_type: str
    reason: str
    paused_by: str
    paused_at: datetime
    circuit: bool  # opened by the processor (paused_by "circuit breaker")
    holds_new: bool  # False: a failing key's circuit, holding only what failed, not yet open
    last_error: str | None
    probe_at: datetime | None
    probes: int
    held: int


@dataclass(frozen=True)
class CircuitChange:
    change: str  # "opened" or "closed"
    id: int
    provider: str
    event_type: str


@dataclass(frozen=True)
class KeyOutcome:
    """One handler key's outcomes in a chunk: failures (0: it succeeded at least once)."""

    provider: str
    handler_key: str
    failures: int
    last_error: str | None = None


@dataclass(frozen=True)
class PauseBacklog:
    paused: int
    open_circuits: int
    oldest_age_seconds: float


def check_key(event_type: str) -> str:
    """A pause's type: an exact type, a prefix pattern ending in ``*``, or ``*`` alone."""
    if not event_type or len(event_type) > 255 or EVERY_TYPE in event_type[:-1]:
        raise ConfigurationError(
            f"cannot pause {event_type!r}: name an event type, a prefix ending in '*' "
            "(invoice.*) or nothing for every type of the provider"
        )
    return event_type


@translated
def pause(
    conn: Connection[Any], provider: str, event_type: str, *, reason: str, by: str
) -> datetime | None:
    """Pause the key; None when it is paused already (nothing changes)."""
    row = conn.execute(
        _statement("pause"),
        {"provider": provider, "event_type": check_key(event_type), "reason": reason, "by": by},
    ).fetchone()
    return None if row is None else row[1]


@translated
def resume(conn: Connection[Any], provider: str, event_type: str, *, by: str) -> int | None:
    """End the key's active pause (committed by the caller); its id, or None if not paused."""
    row = conn.execute(
        _statement("resume"), {"provider": provider, "event_type": event_type, "by": by}
    ).fetchone()
    return None if row is None else int(row[0])


@translated
def release_held(conn: Connection[Any], pause_ids: Iterable[int], *, limit: int) -> int:
    """Move up to ``limit`` rows the resumed pauses held back to due; how many moved."""
    cur = conn.execute(_statement("release_held"), {"pause_ids": list(pause_ids), "limit": limit})
    return cur.rowcount


def release_resumed(conn: Connection[Any], *, batch: int = RELEASE_BATCH) -> int:
    """Release up to ``batch`` of the rows every resumed pause still holds (oldest first); how
    many. A pause whose rows are all released is marked so; the caller repeats while a whole
    batch came back (a transaction each: the rows go back as they were held)."""
    pause_ids = [row[0] for row in _run(conn, "pending_releases", {}).fetchall()]
    if not pause_ids:
        return 0
    moved = release_held(conn, pause_ids, limit=batch)
    if moved < batch:
        _run(conn, "mark_released", {"pause_ids": pause_ids})
    return moved


@translated
def next_due(conn: Connection[Any], *, window_seconds: float) -> float | None:
    """When the sweeper next has pause work (epoch seconds, database clock); None: never, unless
    a function or an operator writes first (statement ``next_due_pause``)."""
    row = _run(conn, "next_due_pause", {"window_seconds": window_seconds}).fetchone()
    return None if row is None else row[0]


@translated
def _run(conn: Connection[Any], name: str, params: dict[str, Any]) -> Any:
    return conn.execute(_statement(name), params)


@translated
def active_pauses(conn: Connection[Any]) -> list[Pause]:
    with conn.cursor(row_factory=class_row(Pause)) as cur:
        return cur.execute(_statement("active_pauses")).fetchall()


@translated
def record_handler_outcomes(
    conn: Connection[Any],
    outcomes: list[KeyOutcome],
    *,
    threshold: int,
    window_seconds: float,
    cooldown_seconds: int,
) -> list[CircuitChange]:
    """Extend or end each key's run of failures; open and close circuits by it."""
    ordered = sorted(outcomes, key=lambda o: (o.provider, o.handler_key))
    with conn.cursor(row_factory=class_row(CircuitChange)) as cur:
        return cur.execute(
            _statement("record_handler_outcomes"),
            {
                "providers": [o.provider for o in ordered],
                "keys": [o.handler_key for o in ordered],
                "failures": [o.failures for o in ordered],
                "errors": [o.last_error for o in ordered],
                "threshold": threshold,
                "window_seconds": window_seconds,
                "cooldown_seconds": cooldown_seconds,
            },
        ).fetchall()


@translated
def send_probes(conn: Connection[Any], *, limit: int, max_cooldown_seconds: int) -> int:
    """Let one held event through for each circuit due a probe; how many were let through."""
    cur = conn.execute(
        _statement("send_probes"),
        {"limit": limit, "max_cooldown_seconds": max_cooldown_seconds},
    )
    return cur.rowcount


@translated
def expire_quiet_circuits(conn: Connection[Any], *, window_seconds: float) -> int:
    """Resume the circuits not yet open whose key has not failed for ``window_seconds``."""
    cur = conn.execute(_statement("expire_quiet_circuits"), {"window_seconds": window_seconds})
    return cur.rowcount


@translated
def pause_backlog(conn: Connection[Any]) -> PauseBacklog:
    with conn.cursor(row_factory=class_row(PauseBacklog)) as cur:
        row = cur.execute(_statement("pause_backlog")).fetchone()
    return row or PauseBacklog(0, 0, 0.0)
