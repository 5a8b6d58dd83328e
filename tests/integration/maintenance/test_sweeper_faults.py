"""The sweeper through the fault layer: a database that accepts and never answers (issue 24,
item 5) must not hold the run for the whole invocation."""

from __future__ import annotations

import json
import logging
import threading
import time
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.faults.proxy import FaultProxy
from tests.integration.maintenance.conftest import Aws, RecordingEvents, claim
from tests.support import load_event, load_function
from webhook_inbox import config
from webhook_inbox.maintenance.publishers import EventBridgePublisher
from webhook_inbox.settings import SweeperSettings
from webhook_inbox.store import db
from webhook_inbox_tools.dev.lambda_runtime import LocalContext

# Scaled down with the invocation (55 s and a 10 s margin in the template), so that the run
# does start its batches and the test takes seconds.
TIMEOUT_S = 4.0


@pytest.fixture
def sweeper_app(faulty_database_url: str, aws: Aws, events: RecordingEvents) -> ModuleType:
    app = load_function("sweeper")
    app.publisher = lambda: EventBridgePublisher(events, event_bus_name="default")
    config.use(
        SweeperSettings(queue_url=aws.queue_url, safety_margin_ms=1000, measure_reserve_ms=500)
    )
    return app


def test_a_database_that_never_answers_ends_the_run_before_the_invocation_does(
    sweeper_app: ModuleType,
    pg_proxy: FaultProxy,
    aws: Aws,
    conn: psycopg.Connection[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    sweeper_app.handler(load_event("schedule"), LocalContext("sweeper", TIMEOUT_S))  # warm
    row_id = claim(conn, "evt_1")  # received, never enqueued: the next run's work
    pg_proxy.set_blackhole(True)  # the kept connection's statements are never answered
    outcome: list[BaseException | dict[str, Any]] = []

    def invoke() -> None:
        try:
            outcome.append(
                sweeper_app.handler(load_event("schedule"), LocalContext("sweeper", TIMEOUT_S))
            )
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test asserts
            outcome.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=invoke, daemon=True)
    worker.start()
    worker.join(TIMEOUT_S)
    elapsed = time.monotonic() - started
    pg_proxy.set_blackhole(False)
    worker.join(30)

    assert elapsed < TIMEOUT_S, "Lambda would have killed the invocation"
    # Counted as StoreUnavailable (store-unavailable pages), not the invocation's failure.
    assert outcome[0] == {"unavailable": "store"}
    [aborted] = [
        json.loads(sweeper_app.logger.registered_formatter.format(record))
        for record in caplog.records
        if record.name == sweeper_app.logger.name and record.getMessage() == "sweep aborted"
    ]
    # The first step asks the database: the partitions ahead.
    assert aborted["sweep"]["stopped_early_at"] == "partitions_ahead"
    assert any("deadline" in error for error in aborted["sweep"]["errors"])
    assert db._connection is None  # the cut connection is not kept
    # The database back, the next run simply does the work.
    result = sweeper_app.handler(load_event("schedule"), LocalContext("sweeper", TIMEOUT_S))
    assert result["reenqueued"] == 1
    assert aws.queued_ids() == [row_id]
