"""What the alarms watch: backlog sizes and ages, from the tables' data modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import Connection

from webhook_inbox.store import inbox_upkeep, outbox, pauses
from webhook_inbox.store.store_errors import translated

# The statuses whose size is a backlog; processed and ignored are history, not backlog.
BACKLOG_STATUSES = ("received", "processing", "failed", "held", "dead_letter")
# Held rows wait for a resume, not for the stack: their age is the pause's alarm, not this one.
UNPROCESSED_STATUSES = ("received", "processing", "failed")


@dataclass(frozen=True)
class Backlog:
    event_counts: dict[str, int]
    oldest_unprocessed_age_seconds: float
    outbox_pending: int
    outbox_dead: int
    oldest_outbox_age_seconds: float
    oldest_held_age_seconds: float = 0.0
    open_circuits: int = 0
    oldest_pause_age_seconds: float = 0.0

    @property
    def dead_lettered_events(self) -> int:
        return self.event_counts["dead_letter"]


@translated
def measure(conn: Connection[Any]) -> Backlog:
    counts = dict.fromkeys(BACKLOG_STATUSES, 0)
    # Processing rows count as unprocessed: a row that keeps failing alternates between failed
    # and processing, and the age must not drop to zero whenever it happens to be leased.
    oldest = held_age = 0.0
    for status, share in inbox_upkeep.event_backlog(conn).items():
        counts[status] = share.count
        if status in UNPROCESSED_STATUSES:
            oldest = max(oldest, share.oldest_age_seconds)
        elif status == "held":
            held_age = share.oldest_age_seconds
    messages = outbox.message_backlog(conn)
    paused = pauses.pause_backlog(conn)
    return Backlog(
        event_counts=counts,
        oldest_unprocessed_age_seconds=oldest,
        outbox_pending=messages.pending,
        outbox_dead=messages.dead,
        oldest_outbox_age_seconds=messages.oldest_pending_age_seconds,
        oldest_held_age_seconds=held_age,
        open_circuits=paused.open_circuits,
        oldest_pause_age_seconds=paused.oldest_age_seconds,
    )
