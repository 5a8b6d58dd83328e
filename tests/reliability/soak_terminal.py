"""How long accepted events waited in the chaos soak: from the claim's commit to the terminal
state, per fault kind (issue 24, item 6).

Each terminal event is attributed to the faults that touched it:

- a wake-up lost after its stamp, by row id: ``lost_send`` (SQS queued the message, the caller
  was told it failed), ``send_kill`` (the ingest worker died between the stamp and the send),
  ``purge`` (every row waiting for its message when the queue was purged; its stamp is its
  ``enqueued_at`` then, or the sweeper's last claim of it if later, since the sweeper backdates
  a re-wake SQS refused); a row lost twice counts under the later loss, the one it waited for;
- ``503_after_commit``: an event the provider was refused after its claim had committed and
  before any 2xx answer (the database's answer came back after ingest's deadline; a blackhole
  mid-claim), so that its next retry is a duplicate; ``503_after_slow_answer`` those of them
  refused inside a slow-answer window, where no other fault runs;
- a fault window (``pg_blackhole``, ``sqs_hang``, ``db_restart``, ``slow_answer``): every event
  claimed before the window ended and terminal after it began;
- ``other``: none of these (processor kills, backend terminations and failed sends still hit
  them while the faults are on).

For each kind: the longest claim → terminal, the longest wait from the fault itself (lost
wake-up: from its stamp; 503 after commit: from the 2xx answer to the provider's retry; window:
from its end), and the last event's terminal time after the kind's last fault ended. A lost
wake-up's wait is also split at the sweeper's first claim of the row after the loss (its re-send,
``sends-<pid>.log``): stamp → re-send runs on the sweeper's compressed clock, re-send → terminal
in real time (the queue, the processors). Times are
wall-clock epoch seconds from one machine: PostgreSQL's ``now()`` and the soak's ``time.time()``
read the same clock.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

WINDOW_KINDS = ("pg_blackhole", "sqs_hang", "db_restart", "slow_answer")
LOST_WAKEUP_KINDS = ("lost_send", "purge", "send_kill")
AFTER_COMMIT = "503_after_commit"
# The same, refused inside a slow-answer window, where nothing else was injected.
AFTER_SLOW_ANSWER = "503_after_slow_answer"


@dataclass
class WakeupLoss:
    """Rows whose wake-up a fault lost at ``at``: row id → the moment they waited from (stamp)."""

    kind: str
    at: float
    rows: dict[int, float]


def snapshot_waiting(url: str, kind: str) -> WakeupLoss:
    """Rows whose message was in the queue (or in flight) right now, with their stamps."""
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute(
            """SELECT id, extract(epoch FROM CASE status WHEN 'processing' THEN now()
                                     ELSE greatest(enqueued_at, available_at) END)::float8
                 FROM webhook_events
                WHERE status = 'processing'
                   OR (status IN ('received', 'failed') AND enqueued_at IS NOT NULL)"""
        ).fetchall()
    return WakeupLoss(kind, time.time(), dict(rows))


def read_sweeper_sends(control_dir: Path) -> dict[int, list[float]]:
    """Row id → the times the sweeper claimed it for a (re-)send, in order."""
    sends: dict[int, list[float]] = defaultdict(list)
    for log in sorted(control_dir.glob("sends-*.log")):
        for line in log.read_text().splitlines():
            at, _, ids = line.partition(" ")
            for row_id in filter(None, ids.split(",")):
                sends[int(row_id)].append(float(at))
    for times in sends.values():
        times.sort()
    return sends


def read_losses(control_dir: Path) -> list[WakeupLoss]:
    """The workers' ``wakeups-<pid>.log`` lines: ``<kind> <time> <row id>,<row id>…``."""
    losses = []
    for log in sorted(control_dir.glob("wakeups-*.log")):
        for line in log.read_text().splitlines():
            kind, at, *ids = line.split()
            moment = float(at)
            rows = {int(i): moment for i in (ids[0].split(",") if ids else []) if i}
            losses.append(WakeupLoss(kind, moment, rows))
    return losses


@dataclass
class KindTimes:
    events: int = 0
    claim_to_terminal_s: float = 0.0  # longest
    since_fault_s: float = 0.0  # longest wait from the fault (see the module's docstring)
    # The last terminal after this kind's last fault ended, of the events claimed before then.
    last_after_clear_s: float = 0.0
    # Lost wake-ups only: stamp -> the sweeper's re-send, and re-send -> terminal (stamp ->
    # terminal for a row that needed no re-send).
    to_resend_s: float = 0.0
    resend_to_terminal_s: float = 0.0

    def add_resend(self, since_s: float, resent: float | None, terminal: float) -> None:
        if resent is None or resent > terminal:
            # Terminal without the sweeper: its message was there after all (a lost answer, a
            # message already in flight when the queue was purged): real time throughout.
            self.resend_to_terminal_s = max(self.resend_to_terminal_s, terminal - since_s)
            return
        self.to_resend_s = max(self.to_resend_s, resent - since_s)
        self.resend_to_terminal_s = max(self.resend_to_terminal_s, terminal - resent)

    def add(self, claim_s: float, since_s: float, terminal: float, cleared: float) -> None:
        self.events += 1
        self.claim_to_terminal_s = max(self.claim_to_terminal_s, terminal - claim_s)
        self.since_fault_s = max(self.since_fault_s, terminal - since_s)
        if claim_s <= cleared:  # (an event that came later did not wait for the fault)
            self.last_after_clear_s = max(self.last_after_clear_s, terminal - cleared)


@dataclass
class TerminalTimes:
    kinds: dict[str, KindTimes] = field(default_factory=dict)
    events: int = 0
    claim_to_terminal_s: float = 0.0
    # The last terminal after every fault stopped, of the events claimed before then.
    last_after_clear_s: float = 0.0

    def summary(self) -> str:
        kinds = "; ".join(
            f"{kind} n={t.events} {t.claim_to_terminal_s:.1f}/{t.since_fault_s:.1f}/"
            f"{t.last_after_clear_s:.1f}"
            + (
                f" (re-sent {t.to_resend_s:.1f}, then {t.resend_to_terminal_s:.1f})"
                if kind in LOST_WAKEUP_KINDS
                else ""
            )
            for kind, t in self.kinds.items()
        )
        return (
            "to terminal, longest s (claim / since the fault / after its last; lost wake-ups: "
            "stamp to the sweeper's re-send, then to terminal): "
            f"{kinds}; all n={self.events} claim {self.claim_to_terminal_s:.1f}, "
            f"last {self.last_after_clear_s:.1f} s after the faults cleared"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    conn: psycopg.Connection[Any],
    control_dir: Path,
    *,
    windows: list[tuple[str, float, float]],
    purged: list[WakeupLoss],
    answers: dict[tuple[str, str], list[tuple[float, int]]],
    cleared_at: float,
) -> TerminalTimes:
    terminal_rows = conn.execute(
        """SELECT id, provider, event_id, extract(epoch FROM received_at)::float8,
                  extract(epoch FROM coalesce(processed_at, updated_at))::float8
             FROM webhook_events WHERE status IN ('processed', 'ignored', 'dead_letter')"""
    ).fetchall()
    ends: dict[str, float] = {}
    for kind, _, end in windows:
        ends[kind] = max(ends.get(kind, 0.0), end)
    times = TerminalTimes()
    found: dict[str, KindTimes] = defaultdict(KindTimes)
    # A row whose wake-up was lost twice waited for the later loss: it counts under that one.
    last_loss: dict[int, tuple[float, str, float]] = {}  # row id -> (at, kind, since)
    for loss in sorted([*read_losses(control_dir), *purged], key=lambda loss: loss.at):
        for row_id, since in loss.rows.items():
            last_loss[row_id] = (loss.at, loss.kind, since)
        ends[loss.kind] = max(ends.get(loss.kind, 0.0), loss.at)
    sweeper_sends = read_sweeper_sends(control_dir)
    for row_id, provider, event_id, claimed, terminal in terminal_rows:
        times.events += 1
        times.claim_to_terminal_s = max(times.claim_to_terminal_s, terminal - claimed)
        if claimed <= cleared_at:
            times.last_after_clear_s = max(times.last_after_clear_s, terminal - cleared_at)
        touched = row_id in last_loss
        if touched:
            lost_at, kind, since = last_loss[row_id]
            sends = sweeper_sends.get(row_id, [])
            # The row was last sent when the sweeper last claimed it, if that is later than its
            # enqueued_at: a re-wake SQS refused is backdated (made stale at once), not sent.
            since = max([since, *(at for at in sends if at <= lost_at)])
            found[kind].add(claimed, since, terminal, ends[kind])
            resent = next((at for at in sends if at >= lost_at), None)
            found[kind].add_resend(since, resent, terminal)
        retry = _retry_after_commit(answers.get((provider, event_id), []), claimed)
        if retry is not None:
            last_failure, answered = retry
            ends[AFTER_COMMIT] = max(ends.get(AFTER_COMMIT, 0.0), last_failure)
            found[AFTER_COMMIT].add(claimed, answered, terminal, last_failure)
            if any(k == "slow_answer" and s <= last_failure <= e for k, s, e in windows):
                found[AFTER_SLOW_ANSWER].add(claimed, answered, terminal, last_failure)
            touched = True
        for kind in WINDOW_KINDS:
            overlapping = [e for k, s, e in windows if k == kind and claimed <= e and terminal >= s]
            if overlapping:
                found[kind].add(claimed, max(overlapping), terminal, ends[kind])
                touched = True
        if not touched:
            found["other"].add(claimed, claimed, terminal, cleared_at)
    order = (*LOST_WAKEUP_KINDS, AFTER_COMMIT, AFTER_SLOW_ANSWER, *WINDOW_KINDS, "other")
    times.kinds = {kind: found[kind] for kind in order if kind in found}
    return times


def _retry_after_commit(
    answers: list[tuple[float, int]], claimed: float
) -> tuple[float, float] | None:
    """(last refusal, the first 2xx answer) when the provider was refused after the event was
    stored and before it had any 2xx answer (it believes the event is not accepted), else None.
    A duplicate refused after the provider had its 2xx is not this case."""
    accepted = min((at for at, status in answers if 200 <= status < 300), default=None)
    if accepted is None:
        return None
    refused = [at for at, status in answers if not 200 <= status < 300 and claimed < at < accepted]
    return (max(refused), accepted) if refused else None
