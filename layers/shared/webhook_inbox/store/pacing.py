"""Data layer for per-handler pacing (handler_pacing, handler_admissions). SQL in
``sql/pacing.sql``; the decisions are :mod:`webhook_inbox.processing.pacing`'s.

Both functions run inside the caller's transaction: :func:`lock_and_read` locks the keys and
reads their state, :func:`write` stores what was decided and hands the turned-away rows back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import Connection
from psycopg.rows import class_row

from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

_statement = SqlFile("pacing").statement

Key = tuple[str, str]  # (provider, handler key)


@dataclass(frozen=True)
class Admission:
    """The pacing's decision about one event: its rate slot, and its lease's end once it runs."""

    event_row_id: int
    provider: str
    handler_key: str
    slot_at: datetime
    running_until: datetime | None


@dataclass(frozen=True)
class PacingState:
    now: datetime  # the database's clock, the one every stored moment is on
    next_slot_at: dict[Key, datetime]
    admissions: list[Admission]  # running now, or an earlier decision about the chunk's rows


@translated
def lock_and_read(
    conn: Connection[Any], keys: Sequence[Key], row_ids: Sequence[int]
) -> PacingState:
    """Lock ``keys`` (created if new) and read their state: sent together, one wait.

    The read is a statement of its own after the locks, so its snapshot holds every decision the
    processors that held them before committed.
    """
    ordered = sorted(set(keys))
    params = {
        "providers": [k[0] for k in ordered],
        "keys": [k[1] for k in ordered],
        "ids": list(row_ids),
    }
    with conn.pipeline():
        locked = conn.execute(_statement("lock_keys"), params)
        conn.execute(_statement("forget_stale"), params)
        with conn.cursor(row_factory=class_row(Admission)) as cur:
            cur.execute(_statement("admissions_of"), params)
            admissions = cur.fetchall()
        rows = locked.fetchall()
    return PacingState(
        now=rows[0][3],
        next_slot_at={(provider, key): slot for provider, key, slot, _ in rows},
        admissions=admissions,
    )


@translated
def write(
    conn: Connection[Any],
    *,
    admissions: Sequence[Admission],
    next_slot_at: dict[Key, datetime],
    deferred: dict[int, datetime],
    owner: str,
) -> set[int]:
    """Store the decisions, advance the keys' slots and hand the deferred rows back (due at
    their moment); returns the rows handed back (a row whose lease was lost is not)."""
    with conn.pipeline():
        if admissions:
            conn.execute(
                _statement("save_admissions"),
                {
                    "ids": [a.event_row_id for a in admissions],
                    "providers": [a.provider for a in admissions],
                    "keys": [a.handler_key for a in admissions],
                    "slots": [a.slot_at for a in admissions],
                    "running_until": [a.running_until for a in admissions],
                },
            )
        if next_slot_at:
            keys = sorted(next_slot_at)
            conn.execute(
                _statement("advance_keys"),
                {
                    "providers": [k[0] for k in keys],
                    "keys": [k[1] for k in keys],
                    "next_slots": [next_slot_at[k] for k in keys],
                },
            )
        if not deferred:
            return set()
        ids = sorted(deferred)
        cur = conn.execute(
            _statement("defer_rows"),
            {"ids": ids, "due_at": [deferred[i] for i in ids], "owner": owner},
        )
        return {row[0] for row in cur.fetchall()}


@translated
def finish(conn: Connection[Any], row_ids: Sequence[int]) -> None:
    """Free the places of events that finished (or were handed back): one autocommit statement."""
    conn.execute(_statement("finish_admissions"), {"ids": list(row_ids)})
