"""The idle-period harness: the sweeper's real entry point in-process, its clock moved on a
minute per tick, the database refusing connections while the stack is idle. Shared by
``tests/integration/maintenance/test_idle.py`` (which asserts each recovery bound) and
``bench/idle_recovery.py`` (which publishes what those runs observe), so the figures in
docs/benchmarks.md come from the very runs the tests check.

The sweeper's clock is moved on a minute per tick; a connection attempt while the database is
unreachable is recorded and refused, as an unreachable database would refuse it. When the
sweeper does connect, the rows it must act on are moved back in time by the idle period
(:func:`travel`), so the database's clock agrees with the sweeper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import boto3
import psycopg

from tests.integration.maintenance.conftest import Aws, RecordingEvents
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import config, idle_ledger
from webhook_inbox.errors import StoreUnavailable
from webhook_inbox.maintenance import idle
from webhook_inbox.maintenance.publishers import EventBridgePublisher

BUCKET = "webhook-inbox-idle-ledger"
TICK_S = 60.0
STALE_S = 480.0


@dataclass(frozen=True)
class Run:
    """One scheduled run as the harness saw it (the bench reads these; the tests need not)."""

    moment: float  # the sweeper's clock when the run started
    idle: bool  # the idle ledger kept it away from the database
    refused: int  # connection attempts the unreachable database refused during the run
    result: dict[str, Any]


class Stack:
    """The sweeper's entry point, its clock and its access to the database."""

    def __init__(self, app: ModuleType, conn: psycopg.Connection[Any], aws: Aws) -> None:
        self.app, self.conn, self.aws = app, conn, aws
        self.offset = 0.0  # how far the sweeper's clock is ahead of the database's
        self.reachable = True
        self.attempts = 0  # connection attempts while the database was unreachable
        self.runs: list[Run] = []
        # How far ``travel`` has moved the rows back: the database's clock, as the rows see it,
        # is real time plus this, and so is every moment it answers with.
        self.travelled = 0.0
        real_connect, real_next_due = app.db.get_connection, idle.next_due

        def get_connection(*args: Any, **kwargs: Any) -> Any:
            if not self.reachable:
                self.attempts += 1
                raise StoreUnavailable("connection refused")
            return real_connect(*args, **kwargs)

        def next_due(*args: Any, **kwargs: Any) -> float | None:
            # The earliest due moment is a row's timestamp, moved back by ``travel``: on the
            # database's clock (and the sweeper's) it is that much later. Without this, every
            # travel would bring the recorded next_due closer, and runs that should skip
            # would connect early.
            due = real_next_due(*args, **kwargs)
            return None if due is None else due + self.travelled

        app.db.get_connection = get_connection
        idle.next_due = next_due
        self._real_connect, self._real_next_due = real_connect, real_next_due
        self.base = app.clock()
        app.clock = lambda: self.base + self.offset

    def close(self) -> None:
        """Give the data layer its own connect, and the idle module its own next_due, back (the
        modules are shared by the process)."""
        self.app.db.get_connection = self._real_connect
        idle.next_due = self._real_next_due

    def now(self) -> float:
        return self.base + self.offset

    def run(self) -> dict[str, Any]:
        """One scheduled run at the sweeper's current time."""
        moment, before = self.now(), self.attempts
        result = dict(self.app.handler(load_event("schedule.json"), FakeLambdaContext()))
        self.runs.append(Run(moment, bool(result.get("idle")), self.attempts - before, result))
        return result

    def tick(self) -> dict[str, Any]:
        """One scheduled run, then the clock moves on a minute."""
        try:
            return self.run()
        finally:
            self.offset += TICK_S

    def awake_tick(self) -> dict[str, Any]:
        """A tick while the stack is busy: the database's clock moves on with the sweeper's."""
        result = self.tick()
        self.sync()
        return result

    def sync(self) -> None:
        """The database's clock catches up with the sweeper's."""
        self.travel(self.offset)
        self.base, self.offset = self.base + self.offset, 0.0

    def travel(self, seconds: float) -> None:
        """The database's clock moves on by ``seconds`` (:func:`travel`), and its answers too."""
        travel(self.conn, seconds)
        self.travelled += seconds

    def sweeper_time(self, database_epoch: float) -> float:
        """A moment read from the database (epoch s), on the sweeper's clock."""
        return database_epoch + self.travelled + self.offset

    def idle_until_connect(self, limit_s: float) -> float:
        """Tick with the database unreachable until a run wants to connect; let that run
        connect, once the database's clock has caught up with the sweeper's (``travel``).
        The sweeper-clock moment of that run; fails if none connects within ``limit_s``."""
        started = self.now()
        while self.now() - started <= limit_s:
            self.reachable = False
            result = self.run()
            if result.get("idle"):
                assert self.attempts == 0
                self.offset += TICK_S
                continue
            assert result == {"unavailable": "store"}, result
            assert self.attempts == 1
            moment = self.now()
            self.travel(self.offset)
            self.base, self.offset = moment, 0.0
            self.attempts, self.reachable = 0, True
            self.tick()
            return moment
        raise AssertionError(f"no run connected within {limit_s} s")


def travel(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Move every timestamp the sweeper reads back by ``seconds``: the database's clock catches
    up with the sweeper's (held rows' '9999-01-01' mark stays)."""
    back = {"back": f"{seconds} seconds"}
    conn.execute(
        "UPDATE webhook_events SET received_at = received_at - %(back)s::interval,"
        " updated_at = updated_at - %(back)s::interval,"
        " enqueued_at = enqueued_at - %(back)s::interval,"
        " lease_expires_at = lease_expires_at - %(back)s::interval,"
        " available_at = CASE WHEN available_at = '9999-01-01 00:00:00+00' THEN available_at"
        " ELSE available_at - %(back)s::interval END",
        back,
    )
    conn.execute(
        "UPDATE outbox_messages SET created_at = created_at - %(back)s::interval,"
        " updated_at = updated_at - %(back)s::interval,"
        " available_at = available_at - %(back)s::interval,"
        " lease_expires_at = lease_expires_at - %(back)s::interval",
        back,
    )


def start_stack(conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents) -> Stack:
    """A sweeper as a new execution environment would start, the ledger's bucket created.

    Inside moto, with ``IDLE_LEDGER_BUCKET`` set to :data:`BUCKET` by the caller (the tests'
    monkeypatch, the bench's environment); :meth:`Stack.close` when done."""
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    config.reset()
    idle_ledger._markers.clear()
    app = load_function("sweeper")
    app.publisher = lambda: EventBridgePublisher(events, event_bus_name="default")
    return Stack(app, conn, aws)


def quiet(stack: Stack) -> None:
    """Runs until one finds nothing to do (and records it)."""
    for _ in range(3):
        result = stack.tick()
        if not result.get("idle") and not any(
            result.get(k) for k in ("reenqueued", "rewoken", "leases_expired", "outbox_published")
        ):
            return
    raise AssertionError("the stack never became quiet")


def mark(stack: Stack, horizon_s: float) -> None:
    """What ingest, the processor or an operator does before writing (at the sweeper's time)."""
    assert idle_ledger.mark_activity(BUCKET, horizon_s=horizon_s, now=stack.now()) is None
    idle_ledger._markers.clear()  # the next writer is another execution environment
