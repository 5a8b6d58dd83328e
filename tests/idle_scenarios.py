"""The idle-period recovery scenarios, on the harness of tests/idle_harness.py: each sets up one
recovery, runs the sweeper through the idle period and returns what it observed (an
:class:`Outcome`). tests/integration/maintenance/test_idle.py asserts on them;
``python -m bench.idle_recovery`` publishes them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import psycopg

from tests.idle_harness import BUCKET, STALE_S, TICK_S, Stack, mark, quiet
from tests.integration.maintenance.conftest import REGION, RecordingEvents, claim
from webhook_inbox import idle_ledger
from webhook_inbox.maintenance.idle import CLOCK_MARGIN_S
from webhook_inbox.store import inbox, outbox

DAY_S = 86_400.0  # IDLE_MAX_SKIP_SECONDS's default, the template's value
DESIGN = 'design.md "Idle means idle"'
RELIABILITY = 'RELIABILITY.md "Nothing lost, nothing stuck"'


@dataclass
class Rig:
    """One scenario's stack, its database connection and what its AWS calls were."""

    stack: Stack
    conn: psycopg.Connection[Any]
    events: RecordingEvents
    calls: Counter[str] = field(default_factory=Counter)  # filled where a hook counts them
    per_run: list[Counter[str]] = field(default_factory=list)  # parallel to stack.runs
    marks: list[Counter[str]] = field(default_factory=list)  # each writer's mark

    def mark(self, horizon_s: float) -> None:
        before = self.calls.copy()
        mark(self.stack, horizon_s)
        self.marks.append(self.calls - before)

    def epoch(self, sql: str, *params: Any) -> float:
        """A moment the database holds (``SELECT extract(epoch FROM …)``), sweeper's clock."""
        row = self.conn.execute(sql, params).fetchone()
        assert row is not None
        return self.stack.sweeper_time(float(row[0]))


@dataclass
class Outcome:
    recovery: str
    bound: str  # what the project states, and where
    limit_s: float  # the bound, in seconds after the trigger
    trigger: str
    observed_s: float
    attempts_idle: int  # refused connects by runs before the one that is due
    # Refused connects by the run that is due (1 when unreachable); None: no run is due
    attempts_due: int | None
    skipped: int  # runs the ledger kept away from the database before that run
    done: bool  # the recovery's effect is there (sent, expired, published, reported)
    reachable: bool = False  # the database reachable throughout, as in the scenario's test
    note: str = ""

    @property
    def held(self) -> bool:
        # A run earlier than the trigger is allowed by the sweeper's clock margin only.
        in_time = -CLOCK_MARGIN_S <= self.observed_s <= self.limit_s
        return in_time and self.done and self.attempts_idle == 0


def _summary(rig: Rig, start: int, due: float) -> tuple[int, int, int]:
    """Runs from ``start`` on: those before ``due`` skipped and their refused connects, and
    the refused connects of the run at ``due``."""
    runs = rig.stack.runs[start:]
    before = [r for r in runs if r.moment < due]
    at_due = [r for r in runs if r.moment == due]
    return (
        sum(r.refused for r in before),
        sum(r.refused for r in at_due[:1]),
        sum(r.idle for r in before),
    )


# --- the scenarios ---------------------------------------------------------------------------


def a_day_idle(rig: Rig) -> Outcome:
    stack = rig.stack
    quiet(stack)
    last_database_run = stack.runs[-1].moment
    start = len(stack.runs)
    stack.reachable = False
    while stack.now() - last_database_run <= DAY_S + TICK_S and stack.tick().get("idle"):
        pass
    due = stack.runs[-1].moment
    attempts_idle, attempts_due, skipped = _summary(rig, start, due)
    return Outcome(
        "a day idle: the daily backstop",
        f"one run connects at most `IDLE_MAX_SKIP_SECONDS` (86,400 s) after the last database"
        f" run ({DESIGN}; RELIABILITY.md)",
        DAY_S,
        "the last database run",
        due - last_database_run,
        attempts_idle,
        attempts_due,
        skipped,
        done=attempts_due == 1,
    )


def a_retry_due_after_an_hour(rig: Rig) -> Outcome:
    stack, conn = rig.stack, rig.conn
    row = claim(conn, "evt_retry")
    conn.execute(
        "UPDATE webhook_events SET status = 'failed', attempts = 1, enqueued_at = NULL,"
        " available_at = now() + interval '1 hour' WHERE id = %s",
        (row,),
    )
    due = rig.epoch(
        "SELECT extract(epoch FROM available_at) FROM webhook_events WHERE id = %s", row
    )
    quiet(stack)
    start = len(stack.runs)
    moment = stack.idle_until_connect(2 * 3600)
    return Outcome(
        "a failed row's retry due an hour later",
        f"sent by the first run at or after its `available_at` ({RELIABILITY}; {DESIGN})",
        TICK_S,
        "`available_at`",
        moment - due,
        *_summary(rig, start, moment),
        done=row in stack.aws.queued_ids(),
    )


def a_lost_wakeup(rig: Rig) -> Outcome:
    stack, conn = rig.stack, rig.conn
    quiet(stack)
    stack.sync()
    # Ingest marks, claims and stamps the row; its SendMessage never happens (a crash).
    rig.mark(horizon_s=10)
    stamped_at = stack.now()
    start = len(stack.runs)
    row = claim(conn, "evt_lost")
    conn.execute("UPDATE webhook_events SET enqueued_at = now() WHERE id = %s", (row,))
    rewoken_at = None
    while rewoken_at is None and stack.now() - stamped_at <= STALE_S + TICK_S:
        moment = stack.now()
        result = stack.awake_tick()
        if result.get("rewoken"):
            rewoken_at = moment
        elif result.get("idle"):
            rewoken_at = stack.idle_until_connect(STALE_S)
    assert rewoken_at is not None, "no run re-woke the row"
    connected = sum(not r.idle for r in stack.runs[start:] if r.moment < rewoken_at)
    return Outcome(
        "a lost wake-up (SendMessage lost after the stamp)",
        f"re-sent within 9 minutes (540 s) of its stamp ({RELIABILITY}; {DESIGN})",
        STALE_S + TICK_S,
        "the stamp",
        rewoken_at - stamped_at,
        *_summary(rig, start, rewoken_at),
        done=stack.aws.queued_ids() == [row],
        note=f"{connected} runs connected while the mark covered them, then idle",
    )


def a_send_failed_after_the_claim(rig: Rig) -> Outcome:
    stack = rig.stack
    quiet(stack)
    rig.mark(horizon_s=10)
    claimed_at = stack.now()
    start = len(stack.runs)
    row = claim(rig.conn, "evt_unsent")  # the stamp cleared: ingest's send failed
    result = stack.tick()
    moment = stack.runs[-1].moment
    return Outcome(
        "a send that failed after the claim",
        f"sent by the next run: ingest marked before claiming ({DESIGN})",
        TICK_S,
        "the claim",
        moment - claimed_at,
        *_summary(rig, start, moment),
        done=result.get("reenqueued") == 1 and stack.aws.queued_ids() == [row],
        reachable=True,
    )


def a_processor_crashed_mid_lease(rig: Rig) -> Outcome:
    stack, conn = rig.stack, rig.conn
    quiet(stack)
    rig.mark(horizon_s=35)
    row = claim(conn, "evt_crash")
    inbox.lease_events(conn, [row], owner="processor:killed", lease_seconds=60)
    expiry = rig.epoch(
        "SELECT extract(epoch FROM lease_expires_at) FROM webhook_events WHERE id = %s", row
    )
    start = len(stack.runs)
    expired_at = None
    for _ in range(10):
        moment = stack.now()
        result = stack.tick()
        if result.get("leases_expired"):
            expired_at = moment
            break
        stack.sync()  # the database's clock moves on with the sweeper's
    assert expired_at is not None, "no run expired the lease"
    attempts_idle, attempts_due, _ = _summary(rig, start, expired_at)
    # Skipping is allowed before the expiry, not from it on.
    late = sum(r.idle for r in stack.runs[start:] if expiry <= r.moment < expired_at)
    return Outcome(
        "a processor that crashed mid-lease (60 s lease)",
        f"its lease expired within a minute of its expiry ({RELIABILITY}; {DESIGN})",
        TICK_S,
        "the lease's expiry",
        expired_at - expiry,
        attempts_idle,
        attempts_due,
        sum(r.idle for r in stack.runs[start:] if r.moment < expired_at),
        done=late == 0 and row in stack.aws.queued_ids(),
        reachable=True,
    )


def an_outbox_retry_due_after_idle(rig: Rig) -> Outcome:
    stack, conn = rig.stack, rig.conn
    outbox.add_message(
        conn,
        topic="customer.welcome",
        deduplication_key="stripe:evt_o:customer.welcome",
        payload={"n": 1},
        source_event_id=None,
    )
    conn.execute("UPDATE outbox_messages SET available_at = now() + interval '30 minutes'")
    due = rig.epoch("SELECT extract(epoch FROM available_at) FROM outbox_messages")
    quiet(stack)
    start = len(stack.runs)
    moment = stack.idle_until_connect(3600)
    return Outcome(
        "an outbox message's retry due 30 minutes later",
        f"published by the first run at or after its `available_at` ({DESIGN})",
        TICK_S,
        "`available_at`",
        moment - due,
        *_summary(rig, start, moment),
        done=rig.events.published_keys() == ["stripe:evt_o:customer.welcome"],
    )


def the_backlog_reported_while_idle(rig: Rig) -> Outcome:
    stack, conn = rig.stack, rig.conn
    dead = claim(conn, "evt_dead")
    inbox.lease_events(conn, [dead], owner="w", lease_seconds=60)
    inbox.mark_dead_letter(conn, dead, owner="w", error_kind="permanent", error="bad")
    quiet(stack)
    quiet_at = stack.runs[-1].moment
    start = len(stack.runs)
    stack.reachable = False
    result = stack.tick()
    reported = result.get("backlog", {}).get("event_counts", {}).get("dead_letter")
    moment = stack.runs[-1].moment
    attempts = sum(r.refused for r in stack.runs[start:])
    return Outcome(
        "the backlog gauges (one dead letter)",
        f"every run reports the backlog, a skipped one the quiet run's, ages advanced ({DESIGN})",
        TICK_S,
        "the quiet run",
        moment - quiet_at,
        attempts,
        None,
        sum(r.idle for r in stack.runs[start:]),
        done=bool(result.get("idle")) and reported == 1,
        note=f"the skipped run reported dead_letter = {reported}",
    )


def an_unreadable_ledger(rig: Rig) -> Outcome:
    stack = rig.stack
    quiet(stack)
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=BUCKET, Key=idle_ledger.RECORD_KEY, Body=b"not json"
    )
    broken_at = stack.now()
    start = len(stack.runs)
    stack.reachable = False
    result = stack.tick()
    moment = stack.runs[-1].moment
    return Outcome(
        "an unreadable ledger (the record not JSON)",
        f"anything unreadable connects: the next run ({DESIGN})",
        0.0,
        "the record's corruption",
        moment - broken_at,
        *_summary(rig, start, moment),
        done=result == {"unavailable": "store"},
    )


SCENARIOS: list[Callable[[Rig], Outcome]] = [
    a_day_idle,
    a_retry_due_after_an_hour,
    a_lost_wakeup,
    a_send_failed_after_the_claim,
    a_processor_crashed_mid_lease,
    an_outbox_retry_due_after_idle,
    the_backlog_reported_while_idle,
    an_unreadable_ledger,
]
