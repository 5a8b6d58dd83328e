"""The outbox step searches from the oldest pending message's day on: each claim plans only
those days' partitions, not the whole history kept, and still takes every pending message."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import psycopg

from tests.integration.maintenance.conftest import Aws, RecordingEvents, make_sweep
from tests.outbox_days import old_outbox_day
from webhook_inbox.store import outbox, partitions
from webhook_inbox.store.partitions import OUTBOX
from webhook_inbox.store.queries import query


def _planned_days(conn: psycopg.Connection[Any], from_id: int) -> set[str]:
    """The day partitions the claim's plan names (its search and its update's target)."""
    statement = query("outbox", "claim_messages").as_string(conn)
    with conn.transaction(force_rollback=True):
        plan = conn.execute(
            "EXPLAIN " + statement, {"limit": 10, "lease_seconds": 60, "from_id": from_id}
        ).fetchall()
    return {day for (line,) in plan for day in re.findall(r"\boutbox_messages_p(\d{8})\b", line)}


def test_a_claim_plans_only_the_days_from_its_bound_on(conn: psycopg.Connection[Any]) -> None:
    past = {f"{old_outbox_day(conn, n, ['published']).day:%Y%m%d}" for n in range(40, 0, -1)}
    today = partitions.day_partition(datetime.now(UTC).date(), OUTBOX)

    bounded = _planned_days(conn, today.low)

    assert f"{today.day:%Y%m%d}" in bounded
    assert not bounded & past
    assert past <= _planned_days(conn, -(1 << 63))  # what every claim planned without it


def test_a_run_publishes_the_pending_messages_of_old_days_and_today(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    oldest = old_outbox_day(conn, 20, ["published", "pending"])
    old_outbox_day(conn, 3, ["pending", "dead"])
    outbox.add_message(conn, topic="t", deduplication_key="today", payload={}, source_event_id=None)
    assert outbox.oldest_pending_message(conn) == oldest.low + 2

    report = make_sweep(conn, aws, events).run()

    assert sorted(events.published_keys()) == ["k_20_1", "k_3_0", "today"]
    assert report.outbox_published == 3
    assert outbox.oldest_pending_message(conn) is None


def test_a_run_with_nothing_pending_claims_nothing(
    conn: psycopg.Connection[Any], aws: Aws, events: RecordingEvents
) -> None:
    old_outbox_day(conn, 2, ["published", "dead"])
    report = make_sweep(conn, aws, events).run()
    assert events.entries == []
    assert "outbox" in report.completed_steps
