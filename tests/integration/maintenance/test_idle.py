"""Idle means idle: across an idle period the sweeper opens no connection, and every recovery
bound still holds (real PostgreSQL, moto S3 and SQS, the sweeper's entry point in-process).

The sweeper's clock is moved on a minute per tick; the database cannot be reached while the
stack is idle (a connection attempt is recorded and refused, as an unreachable database would
refuse it). When the sweeper does connect, the rows it must act on are moved back in time by
the idle period (``_travel``), so the database's clock agrees with the sweeper's.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import psycopg
import pytest

from tests.integration.maintenance.conftest import Aws, RecordingEvents, claim
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import config, idle_ledger
from webhook_inbox.errors import StoreUnavailable
from webhook_inbox.maintenance.publishers import EventBridgePublisher
from webhook_inbox.store import inbox, outbox

BUCKET = "webhook-inbox-idle-ledger"
TICK_S = 60.0
STALE_S = 480.0


class Stack:
    """The sweeper's entry point, its clock and its access to the database."""

    def __init__(self, app: ModuleType, conn: psycopg.Connection[Any], aws: Aws) -> None:
        self.app, self.conn, self.aws = app, conn, aws
        self.offset = 0.0  # how far the sweeper's clock is ahead of the database's
        self.reachable = True
        self.attempts = 0  # connection attempts while the database was unreachable
        real_connect = app.db.get_connection

        def get_connection(*args: Any, **kwargs: Any) -> Any:
            if not self.reachable:
                self.attempts += 1
                raise StoreUnavailable("connection refused")
            return real_connect(*args, **kwargs)

        app.db.get_connection = get_connection
        self._real_connect = real_connect
        self.base = app.clock()
        app.clock = lambda: self.base + self.offset

    def now(self) -> float:
        return self.base + self.offset

    def run(self) -> dict[str, Any]:
        """One scheduled run at the sweeper's current time."""
        return dict(self.app.handler(load_event("schedule.json"), FakeLambdaContext()))

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
        _travel(self.conn, self.offset)
        self.base, self.offset = self.base + self.offset, 0.0

    def idle_until_connect(self, limit_s: float) -> float:
        """Tick with the database unreachable until a run wants to connect; let that run
        connect, once the database's clock has caught up with the sweeper's (``_travel``).
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
            _travel(self.conn, self.offset)
            self.base, self.offset = moment, 0.0
            self.attempts, self.reachable = 0, True
            self.tick()
            return moment
        raise AssertionError(f"no run connected within {limit_s} s")


def _travel(conn: psycopg.Connection[Any], seconds: float) -> None:
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


@pytest.fixture
def stack(
    database_url: str,
    aws: Aws,
    events: RecordingEvents,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Stack]:
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    monkeypatch.setenv("IDLE_LEDGER_BUCKET", BUCKET)
    config.reset()
    idle_ledger._markers.clear()
    app = load_function("sweeper")
    app.publisher = lambda: EventBridgePublisher(events, event_bus_name="default")
    stack = Stack(app, conn, aws)
    yield stack
    app.db.get_connection = stack._real_connect


def _quiet(stack: Stack) -> None:
    """Runs until one finds nothing to do (and records it)."""
    for _ in range(3):
        result = stack.tick()
        if not result.get("idle") and not any(
            result.get(k) for k in ("reenqueued", "rewoken", "leases_expired", "outbox_published")
        ):
            return
    raise AssertionError("the stack never became quiet")


def _mark(stack: Stack, horizon_s: float) -> None:
    """What ingest, the processor or an operator does before writing (at the sweeper's time)."""
    assert idle_ledger.mark_activity(BUCKET, horizon_s=horizon_s, now=stack.now()) is None
    idle_ledger._markers.clear()  # the next writer is another execution environment


def test_an_idle_stack_opens_no_connection_for_a_day(stack: Stack) -> None:
    _quiet(stack)
    stack.reachable = False
    for _ in range(24 * 60 - 1):
        assert stack.tick()["idle"] is True
    assert stack.attempts == 0
    # The backstop: a day after the last database run, one run looks (IDLE_MAX_SKIP_SECONDS).
    stack.tick()
    assert stack.attempts == 1


def test_a_failed_row_whose_retry_comes_due_after_an_hour_is_sent_on_time(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    row = claim(conn, "evt_retry")
    conn.execute(
        "UPDATE webhook_events SET status = 'failed', attempts = 1, enqueued_at = NULL,"
        " available_at = now() + interval '1 hour' WHERE id = %s",
        (row,),
    )
    _quiet(stack)
    due = stack.now() + 3600 - TICK_S  # the quiet run started a tick before
    moment = stack.idle_until_connect(2 * 3600)
    assert due - 5 - TICK_S < moment <= due + TICK_S  # the first tick at or after due
    assert row in stack.aws.queued_ids()


def test_a_lost_wakeup_is_resent_within_nine_minutes_of_its_stamp(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    _quiet(stack)
    stack.sync()
    # Ingest marks, claims and stamps the row; its SendMessage never happens (a crash).
    _mark(stack, horizon_s=10)
    stamped_at = stack.now()
    row = claim(conn, "evt_lost")
    conn.execute("UPDATE webhook_events SET enqueued_at = now() WHERE id = %s", (row,))
    # The runs after the activity look at the database until one starts after the mark; then
    # the stack is idle, the database unreachable, until the re-wake comes due.
    rewoken_at = None
    while rewoken_at is None and stack.now() - stamped_at <= STALE_S + TICK_S:
        moment = stack.now()
        result = stack.awake_tick()
        if result.get("rewoken"):
            rewoken_at = moment
        elif result.get("idle"):
            rewoken_at = stack.idle_until_connect(STALE_S)
    assert rewoken_at is not None
    assert rewoken_at - stamped_at <= STALE_S + TICK_S  # 9 minutes
    assert stack.aws.queued_ids() == [row]


def test_a_send_that_failed_after_the_claim_is_sent_by_the_next_run(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    _quiet(stack)
    _mark(stack, horizon_s=10)
    row = claim(conn, "evt_unsent")  # the stamp cleared: ingest's send failed
    result = stack.tick()
    assert result["reenqueued"] == 1
    assert stack.aws.queued_ids() == [row]


def test_a_processor_that_crashed_mid_lease_has_its_lease_expired_on_time(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    _quiet(stack)
    _mark(stack, horizon_s=35)
    row = claim(conn, "evt_crash")
    inbox.lease_events(conn, [row], owner="processor:killed", lease_seconds=60)
    leased_at = stack.now()
    expired_at = None
    for _ in range(10):
        moment = stack.now()
        result = stack.tick()
        assert not result.get("idle") or moment < leased_at + 60
        if result.get("leases_expired"):
            expired_at = moment
            break
        _travel(conn, stack.offset)  # the database's clock moves on with the sweeper's
        stack.base, stack.offset = stack.base + stack.offset, 0.0
    assert expired_at is not None
    assert expired_at - leased_at <= 60 + TICK_S
    assert row in stack.aws.queued_ids()


def test_an_outbox_retry_due_after_idle_is_published_on_time(
    stack: Stack, conn: psycopg.Connection[Any], events: RecordingEvents
) -> None:
    outbox.add_message(
        conn,
        topic="customer.welcome",
        deduplication_key="stripe:evt_o:customer.welcome",
        payload={"n": 1},
        source_event_id=None,
    )
    conn.execute("UPDATE outbox_messages SET available_at = now() + interval '30 minutes'")
    _quiet(stack)
    due = stack.now() + 1800 - TICK_S
    moment = stack.idle_until_connect(3600)
    assert moment <= due + TICK_S
    assert events.published_keys() == ["stripe:evt_o:customer.welcome"]


def test_an_unreadable_ledger_connects(stack: Stack) -> None:
    _quiet(stack)
    boto3.client("s3", region_name="us-east-1").put_object(
        Bucket=BUCKET, Key=idle_ledger.RECORD_KEY, Body=b"not json"
    )
    stack.reachable = False
    assert stack.tick() == {"unavailable": "store"}
    assert stack.attempts == 1


def test_an_idle_run_reports_the_backlog_the_alarms_watch(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    dead = claim(conn, "evt_dead")
    inbox.lease_events(conn, [dead], owner="w", lease_seconds=60)
    inbox.mark_dead_letter(conn, dead, owner="w", error_kind="permanent", error="bad")
    _quiet(stack)
    stack.reachable = False
    result = stack.tick()
    assert result["idle"] is True
    assert result["backlog"]["event_counts"]["dead_letter"] == 1
    assert stack.attempts == 0


def _sweeper_sessions(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sweeper'"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_skipped_run_closes_the_connection_an_earlier_run_kept(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    """Aurora counts an idle open connection as activity: one kept across an idle period
    would hold a pausing cluster awake however few runs connect."""
    _quiet(stack)
    assert _sweeper_sessions(conn) == 1  # the warm environment's kept connection
    assert stack.tick()["idle"] is True
    assert stack.app.db.current_connection() is None
    assert _sweeper_sessions(conn) == 0  # closed on the server's side too


def test_without_a_ledger_bucket_every_run_connects(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Development and the tests' own stacks set no IDLE_LEDGER_BUCKET: nothing is read or
    written, and the sweeper connects every minute as it always did."""
    monkeypatch.delenv("IDLE_LEDGER_BUCKET")
    config.reset()
    for _ in range(3):
        result = stack.tick()
        assert not result.get("idle"), result
    stack.reachable = False
    for expected in (1, 2, 3):
        assert stack.tick() == {"unavailable": "store"}
        assert stack.attempts == expected
    listed = boto3.client("s3", region_name="us-east-1").list_objects_v2(Bucket=BUCKET)
    assert listed.get("KeyCount", 0) == 0
