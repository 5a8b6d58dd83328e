"""A provider's retry of a delivery answered 503 after its claim committed wakes the row at once.

Issue 24, item 3: when the database's answer came back after ingest's answer deadline, ingest
answered 503 although the claim had committed with ``enqueued_at`` stamped and no wake-up sent.
The provider's retry was then a plain duplicate (200) that sent nothing, and the row waited for
the sweeper's stale rule. Now a duplicate of a row still waiting whose stamp is older than
``inbox.REWAKE_AFTER_S`` is stamped again in the claim itself and its wake-up sent once more.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.faults.proxy import FaultProxy
from tests.integration.ingest.conftest import IngestHarness
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing import handlers
from webhook_inbox.processing.batch import QueueMessage
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store import inbox
from webhook_inbox.store.inbox import LeasedEvent

STATEMENT_TIMEOUT_MS = 1500  # ingest's answer deadline in the fault test: 1.5 s + 1 s


def _delivery(harness: IngestHarness, event_id: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"id": event_id, "type": "invoice.paid"}).encode()
    return body, harness.sign("stripe", body)


def _row(conn: psycopg.Connection[Any], event_id: str) -> dict[str, Any]:
    found = inbox.get_event(conn, "stripe", event_id)
    assert found is not None
    return found


def _stamp_ages_by(conn: psycopg.Connection[Any], event_id: str, seconds: float) -> None:
    """The row's wake-up was stamped ``seconds`` earlier than it was (time passes)."""
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = enqueued_at - make_interval(secs => %s)"
        " WHERE provider = 'stripe' AND event_id = %s",
        (seconds, event_id),
    )


def _stored_and_woken(harness: IngestHarness, event_id: str) -> tuple[bytes, dict[str, str]]:
    delivery = _delivery(harness, event_id)
    assert harness.deliver("stripe", *delivery).status == 202
    assert len(harness.queued()) == 1  # the first wake-up, taken off the queue
    return delivery


def test_a_duplicate_of_a_waiting_row_with_an_old_stamp_sends_one_wake_up(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    delivery = _stored_and_woken(harness, "evt_lost")
    row = _row(conn, "evt_lost")
    _stamp_ages_by(conn, "evt_lost", inbox.REWAKE_AFTER_S + 1)

    # A storm of retries: the first one re-sends, the others find a fresh stamp.
    statuses = [harness.deliver("stripe", *delivery).status for _ in range(5)]

    assert statuses == [200] * 5
    assert harness.queued() == [{"id": row["id"]}]  # before: []
    assert _row(conn, "evt_lost")["enqueued_at"] > row["enqueued_at"]


def test_a_duplicate_within_the_rewake_interval_sends_nothing(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    delivery = _stored_and_woken(harness, "evt_fresh")
    stamped = _row(conn, "evt_fresh")["enqueued_at"]

    assert harness.deliver("stripe", *delivery).status == 200

    assert harness.queued() == []
    assert _row(conn, "evt_fresh")["enqueued_at"] == stamped


@pytest.mark.parametrize(
    ("status", "due", "woken"),
    [
        ("processed", True, False),
        ("ignored", True, False),
        ("dead_letter", True, False),
        ("processing", True, False),
        ("failed", False, False),  # its retry is not due yet: its own wake-up is on its way
        ("failed", True, True),
    ],
)
def test_only_a_row_still_waiting_is_woken_by_a_duplicate(
    harness: IngestHarness, conn: psycopg.Connection[Any], status: str, due: bool, woken: bool
) -> None:
    delivery = _stored_and_woken(harness, "evt_edge")
    conn.execute(
        "UPDATE webhook_events SET status = %s,"
        " available_at = now() + CASE WHEN %s THEN interval '-1 second' ELSE interval '1 hour' END,"
        " lease_owner = CASE WHEN %s = 'processing' THEN 'w' END,"
        " lease_expires_at = CASE WHEN %s = 'processing' THEN now() + interval '1 minute' END"
        " WHERE event_id = 'evt_edge'",
        (status, due, status, status),
    )
    _stamp_ages_by(conn, "evt_edge", 60)

    assert harness.deliver("stripe", *delivery).status == 200

    row = _row(conn, "evt_edge")
    assert harness.queued() == ([{"id": row["id"]}] if woken else [])


def test_a_failed_rewake_send_clears_the_stamp_for_the_sweeper(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    delivery = _stored_and_woken(harness, "evt_unsent")
    _stamp_ages_by(conn, "evt_unsent", 60)
    harness.sqs.delete_queue(QueueUrl=harness.queue_url)  # SendMessage now fails

    assert harness.deliver("stripe", *delivery).status == 200

    assert _row(conn, "evt_unsent")["enqueued_at"] is None  # due for the next sweep


def test_the_retry_of_a_503_answered_after_the_claim_committed_is_processed_at_once(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT_MS", str(STATEMENT_TIMEOUT_MS))
    applied: list[str] = []

    def record(_conn: psycopg.Connection[Any], event: LeasedEvent) -> None:
        applied.append(event.event_id)

    monkeypatch.setitem(handlers.HANDLERS, ("stripe", "invoice.paid"), record)
    _stored_and_woken(harness, "evt_warm")  # ingest's connection is open before the fault
    delivery = _delivery(harness, "evt_slow_answer")
    # The claim reaches PostgreSQL and commits; its answer comes back after ingest's deadline.
    pg_proxy.latency(down_ms=STATEMENT_TIMEOUT_MS + 1500)
    assert harness.deliver("stripe", *delivery).status == 503
    pg_proxy.clear()
    row = _row(conn, "evt_slow_answer")
    assert (row["status"], row["enqueued_at"] is not None) == ("received", True)
    assert harness.queued() == []  # stamped, never sent

    assert harness.deliver("stripe", *delivery).status == 200  # the provider's retry
    bodies = harness.queued()
    assert bodies == [{"id": row["id"]}]  # before: [] (the row waited for the stale rule)
    processing.process_messages(
        [QueueMessage("m1", json.dumps(body)) for body in bodies],
        owner="processor-under-test",
        remaining_ms=lambda: 30_000,
        settings=ProcessorSettings(queue_url=""),
    )

    assert _row(conn, "evt_slow_answer")["status"] == "processed"
    assert applied == ["evt_slow_answer"]  # woken by the retry itself, not by a later sweep
