"""Idle means idle: across an idle period the sweeper opens no connection, and every recovery
bound still holds (real PostgreSQL, moto S3 and SQS, the sweeper's entry point in-process).

The scenarios (tests/idle_scenarios.py, which bench/idle_recovery.py runs and publishes) on the
harness of tests/idle_harness.py: the sweeper's clock moved on a minute per tick, the database
refusing connections while the stack is idle, rows' timestamps moved so the database's clock
agrees with the sweeper's when it connects.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest

from tests import idle_scenarios as scenarios
from tests.idle_harness import BUCKET, Stack, quiet, start_stack
from tests.idle_scenarios import Outcome, Rig
from tests.integration.maintenance.conftest import Aws, RecordingEvents
from webhook_inbox import config
from webhook_inbox.maintenance.idle import CLOCK_MARGIN_S


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


@pytest.fixture
def rig(stack: Stack, conn: psycopg.Connection[Any], events: RecordingEvents) -> Rig:
    return Rig(stack, conn, events)


def _held(outcome: Outcome) -> Outcome:
    """The scenario's recovery happened, within its bound, and no run tried the database
    before it was due."""
    assert outcome.done, outcome
    assert -CLOCK_MARGIN_S <= outcome.observed_s <= outcome.limit_s, outcome
    assert outcome.attempts_idle == 0, outcome
    assert outcome.held
    return outcome


def test_an_idle_stack_opens_no_connection_for_a_day(rig: Rig) -> None:
    outcome = _held(scenarios.a_day_idle(rig))
    assert outcome.skipped == 24 * 60 - 1
    # The backstop: a day after the last database run, one run looks (IDLE_MAX_SKIP_SECONDS).
    assert outcome.attempts_due == 1


def test_a_failed_row_whose_retry_comes_due_after_an_hour_is_sent_on_time(rig: Rig) -> None:
    outcome = _held(scenarios.a_retry_due_after_an_hour(rig))
    assert outcome.skipped >= 58  # idle for the hour, the database unreachable
    assert outcome.attempts_due == 1


def test_a_lost_wakeup_is_resent_within_nine_minutes_of_its_stamp(rig: Rig) -> None:
    outcome = _held(scenarios.a_lost_wakeup(rig))
    # Idle between the writer's mark running out and the re-wake: the bound holds across a
    # skipped run, not only while every run connects.
    assert outcome.skipped >= 1
    assert outcome.attempts_due == 1


def test_a_send_that_failed_after_the_claim_is_sent_by_the_next_run(rig: Rig) -> None:
    _held(scenarios.a_send_failed_after_the_claim(rig))


def test_a_processor_that_crashed_mid_lease_has_its_lease_expired_on_time(rig: Rig) -> None:
    _held(scenarios.a_processor_crashed_mid_lease(rig))


def test_an_outbox_retry_due_after_idle_is_published_on_time(rig: Rig) -> None:
    outcome = _held(scenarios.an_outbox_retry_due_after_idle(rig))
    assert outcome.skipped >= 28
    assert outcome.attempts_due == 1


def test_an_unreadable_ledger_connects(rig: Rig) -> None:
    outcome = _held(scenarios.an_unreadable_ledger(rig))
    assert outcome.skipped == 0
    assert outcome.attempts_due == 1


def test_an_idle_run_reports_the_backlog_the_alarms_watch(rig: Rig) -> None:
    outcome = _held(scenarios.the_backlog_reported_while_idle(rig))
    assert outcome.skipped == 1  # reported by a run that skipped the database


def test_every_scenario_is_asserted_here() -> None:
    """bench.idle_recovery publishes every scenario; each is one of the tests above."""
    source = Path(__file__).read_text(encoding="utf-8")
    for scenario in scenarios.SCENARIOS:
        assert f"scenarios.{scenario.__name__}(rig)" in source, scenario.__name__


def _sweeper_sessions(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-inbox-sweeper'"
        " AND datname = current_database()"  # the server is shared by a worker's other tests
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
    # Closed on the server's side too: its backend leaves pg_stat_activity once it has read the
    # client's goodbye, which a busy machine can delay; a kept connection never leaves.
    deadline = time.monotonic() + 30
    while _sweeper_sessions(conn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sweeper_sessions(conn) == 0


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
