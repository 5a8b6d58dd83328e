"""What one sweeper run did: the fields of its one summary log line, filled in by the steps."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from webhook_inbox.store.backlog_metrics import Backlog

MAX_REPORTED_ERRORS = 5


@dataclass
class SweepReport:
    leases_expired: int = 0
    leases_dead_lettered: int = 0
    held_released: int = 0  # rows of resumed pauses back to due
    probes_sent: int = 0  # one held event per open circuit due a probe
    reenqueued: int = 0
    rewoken: int = 0  # stale rows re-woken (packed, up to 25 per message)
    enqueue_failed: int = 0
    outbox_published: int = 0
    outbox_retried: int = 0
    outbox_dead: int = 0
    outbox_released: int = 0
    payloads_purged: int = 0
    # Rows stored before the switch, deleted, and rows of dropped partitions (keys forgotten).
    events_deleted: int = 0
    partitions_created: int = 0
    partitions_dropped: int = 0
    # Partitions past the key retention kept because a row in them is not terminal yet.
    partitions_kept: int = 0
    partitions_switched: bool = False  # this run made the switch to the partitioned inbox
    outbox_deleted: int = 0
    completed_steps: list[str] = field(default_factory=list)
    # The first step that ran out of time (None: every step finished its work).
    stopped_early_at: str | None = None
    backlog: Backlog | None = None
    # When the backlog was measured (epoch s): a skipped run advances its ages from here.
    backlog_measured_at: float = field(default=0.0, repr=False)
    duration_ms: int = 0
    # A few distinct AWS error texts (codes and AWS's messages; never ids or payloads).
    errors: list[str] = field(default_factory=list)

    def note_error(self, step: str, text: str) -> None:
        entry = f"{step}: {text}"[:300]
        if entry not in self.errors and len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(entry)

    def as_log(self) -> dict[str, Any]:
        """The one summary log line: counts and step names only, never ids or payloads. The
        pause and partition fields only when there is something to say: a stack that pauses
        nothing pays no log bytes for them, nor a run that made no partition change (every run
        writes this line)."""
        fields = asdict(self)
        del fields["backlog_measured_at"]
        for name in _PAUSE_COUNTS + _PARTITION_COUNTS:
            if not fields[name]:
                del fields[name]
        if self.backlog:
            backlog = asdict(self.backlog)
            for name in _PAUSE_GAUGES:
                if not backlog[name]:
                    del backlog[name]
            if not backlog["event_counts"].get("held"):
                backlog["event_counts"].pop("held", None)
            fields["backlog"] = backlog
        return fields


_PAUSE_COUNTS = ("held_released", "probes_sent")
_PARTITION_COUNTS = (
    "partitions_created",
    "partitions_dropped",
    "partitions_kept",
    "partitions_switched",
)
_PAUSE_GAUGES = ("oldest_held_age_seconds", "open_circuits", "oldest_pause_age_seconds")
