"""A duplicate delivery is answered promptly while the processor holds its row locked.

Issue 14, suspected item 4 (confirmed): the careful pass marks each event in the batch's
transaction, so the row lock of an early event lasts until the whole batch commits. A duplicate
delivery of that event counted itself with ``ON CONFLICT DO UPDATE``, which waits for the row
lock: past the lock timeout it was answered 503 (a retry for the provider, a lost delivery for
GitHub, which does not retry). The claim now waits a moment at most for the count; a row it
finds locked exists (the conflict proves it, a plain read confirms it): 200, uncounted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.integration.ingest.conftest import IngestHarness, row_count
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing import handlers
from webhook_inbox.processing.batch import QueueMessage
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store.inbox import LeasedEvent

LOCK_TIMEOUT_MS = 1000  # the functions' lock timeout in this test (production default: 2000)
# The later event's handler keeps the batch (and the early row's lock) open until the duplicate
# has its answer: the answer is given under the lock by construction, however slow the machine,
# instead of racing a fixed pause. The bound only ends a test that hangs.
HOLD_AT_MOST_S = 30


def _delivery(harness: IngestHarness, event_id: str, event_type: str) -> tuple[bytes, Any]:
    body = json.dumps({"id": event_id, "type": event_type, "data": {"object": {"id": event_id}}})
    return body.encode(), harness.sign("stripe", body.encode())


def test_a_duplicate_of_an_event_locked_by_the_careful_pass_is_a_prompt_200(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    connection_per_thread: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DB_LOCK_TIMEOUT_MS", str(LOCK_TIMEOUT_MS))
    early = _delivery(harness, "evt_early", "customer.created")
    slow = _delivery(harness, "evt_slow", "slow.thing")
    bad = _delivery(harness, "evt_bad", "bad.thing")
    for body, headers in (early, slow, bad):
        assert harness.deliver("stripe", body, headers).status == 202
    ids = [r[0] for r in conn.execute("SELECT id FROM webhook_events ORDER BY id").fetchall()]

    early_marked = threading.Event()
    duplicate_answered = threading.Event()
    runs: list[str] = []

    def slow_handler(_conn: psycopg.Connection[Any], _event: LeasedEvent) -> None:
        runs.append("slow")
        if len(runs) == 2:  # the careful pass: the early event is marked, its row locked
            early_marked.set()
            duplicate_answered.wait(HOLD_AT_MOST_S)

    def failing_handler(_conn: psycopg.Connection[Any], _event: LeasedEvent) -> None:
        raise RuntimeError("sends the batch the careful way")

    monkeypatch.setattr(
        handlers,
        "HANDLERS",
        {
            **handlers.HANDLERS,
            ("stripe", "slow.thing"): slow_handler,
            ("stripe", "bad.thing"): failing_handler,
        },
    )
    answer: list[tuple[int, float]] = []

    def duplicate_of_the_early_event() -> None:
        connection_per_thread("webhook-inbox-ingest")
        assert early_marked.wait(10)
        started = time.monotonic()
        status = harness.deliver("stripe", *early).status
        answer.append((status, time.monotonic() - started))
        duplicate_answered.set()

    sender = threading.Thread(target=duplicate_of_the_early_event)
    sender.start()
    outcome = processing.process_messages(
        [QueueMessage(f"m{i}", json.dumps({"id": i})) for i in ids],
        owner="processor-under-test",
        remaining_ms=lambda: 60_000,
        settings=ProcessorSettings(queue_url=""),
    )
    sender.join(HOLD_AT_MOST_S)

    (status, seconds) = answer[0]
    # Before: 503 after the lock timeout, the batch still holding the lock.
    assert status == 200
    assert seconds < HOLD_AT_MOST_S  # answered while the batch held the lock, not after
    statuses = {r.event.event_id: r.outcome for r in outcome.results}
    assert statuses == {"evt_early": "processed", "evt_slow": "processed", "evt_bad": "failed"}
    assert row_count(conn) == 3
