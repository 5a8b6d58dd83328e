"""Idle means idle: across an idle period the sweeper opens no connection, and every recovery
bound still holds (real PostgreSQL, moto S3 and SQS, the sweeper's entry point in-process).

The harness (tests/idle_harness.py, shared with bench/idle_recovery.py, which publishes what
these runs observe): the sweeper's clock moved on a minute per tick, the database refusing
connections while the stack is idle, rows' timestamps moved so the database's clock agrees with
the sweeper's when it connects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import psycopg
import pytest

from tests.idle_harness import BUCKET, STALE_S, TICK_S, Stack, mark, quiet, start_stack
from tests.integration.maintenance.conftest import Aws, RecordingEvents, claim
from webhook_inbox import config, idle_ledger
from webhook_inbox.store import inbox, outbox


@pytest.fixture
def stack(
    database_url: str,
    aws: Aws,
    events: RecordingEvents,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Stack]:
    monkeypatch.setenv("IDLE_LEDGER_BUCKET", BUCKET)
    stack = start_stack(conn, aws, events)
    yield stack
    stack.close()


def test_an_idle_stack_opens_no_connection_for_a_day(stack: Stack) -> None:
    quiet(stack)
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
    quiet(stack)
    due = stack.now() + 3600 - TICK_S  # the quiet run started a tick before
    moment = stack.idle_until_connect(2 * 3600)
    assert due - 5 - TICK_S < moment <= due + TICK_S  # the first tick at or after due
    assert row in stack.aws.queued_ids()


def test_a_lost_wakeup_is_resent_within_nine_minutes_of_its_stamp(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    quiet(stack)
    stack.sync()
    # Ingest marks, claims and stamps the row; its SendMessage never happens (a crash).
    mark(stack, horizon_s=10)
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
    quiet(stack)
    mark(stack, horizon_s=10)
    row = claim(conn, "evt_unsent")  # the stamp cleared: ingest's send failed
    result = stack.tick()
    assert result["reenqueued"] == 1
    assert stack.aws.queued_ids() == [row]


def test_a_processor_that_crashed_mid_lease_has_its_lease_expired_on_time(
    stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    quiet(stack)
    mark(stack, horizon_s=35)
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
        stack.sync()  # the database's clock moves on with the sweeper's
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
    quiet(stack)
    due = stack.now() + 1800 - TICK_S
    moment = stack.idle_until_connect(3600)
    assert moment <= due + TICK_S
    assert events.published_keys() == ["stripe:evt_o:customer.welcome"]


def test_an_unreadable_ledger_connects(stack: Stack) -> None:
    quiet(stack)
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
    quiet(stack)
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
    quiet(stack)
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
