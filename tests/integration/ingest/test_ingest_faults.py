"""Ingest through the fault layer: the network between the function and PostgreSQL misbehaves."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from tests.faults.proxy import FaultProxy
from tests.integration.ingest.conftest import IngestHarness, row_count

INGEST_TIMEOUT_S = 8.0  # template: IngestFunction Timeout


def _deliver_new(harness: IngestHarness) -> int:
    body = json.dumps({"id": f"evt_{uuid.uuid4().hex[:16]}", "type": "invoice.paid"}).encode()
    return harness.deliver("stripe", body, harness.sign("stripe", body)).status


def _wait_idle_closed(proxy: FaultProxy, count: int) -> None:
    deadline = time.monotonic() + 5
    while proxy.idle_closed < count:
        assert time.monotonic() < deadline, "the proxy never closed the idle connection"
        time.sleep(0.02)


def test_first_delivery_after_the_idle_connection_was_closed_is_accepted(
    harness: IngestHarness,
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
) -> None:
    assert _deliver_new(harness) == 202
    # What RDS Proxy's IdleClientTimeout does while the function is frozen.
    pg_proxy.idle_timeout_s = 0.2
    _wait_idle_closed(pg_proxy, 1)

    assert _deliver_new(harness) == 202

    assert row_count(conn) == 2
    assert len(harness.queued()) == 2


def test_a_claim_the_server_ran_before_the_reset_is_answered_2xx_and_still_enqueued(
    harness: IngestHarness,
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
) -> None:
    assert _deliver_new(harness) == 202
    harness.queued()
    # The claim reaches PostgreSQL and commits; its answer never comes back.
    pg_proxy.reset_next_request()

    reply_status = _deliver_new(harness)

    # The retry finds the row its first attempt stored: a 2xx (the provider stops sending) and
    # a wake-up for it, since the first attempt's stamp promised one that was never sent.
    assert reply_status in (200, 202)
    assert row_count(conn) == 2
    newest = conn.execute("SELECT id FROM webhook_events ORDER BY id DESC LIMIT 1").fetchone()
    assert newest is not None
    assert {"id": newest[0]} in harness.queued()


def test_a_database_that_refuses_connections_is_a_prompt_503_not_a_retry_loop(
    harness: IngestHarness,
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
) -> None:
    assert _deliver_new(harness) == 202
    pg_proxy.refuse = True
    pg_proxy.close_all()
    started = time.monotonic()

    assert _deliver_new(harness) == 503

    assert time.monotonic() - started < 3
    assert pg_proxy.refused == 1  # the one retry on a fresh connection, nothing more
    assert row_count(conn) == 1


def test_a_database_that_accepts_and_never_answers_is_a_503_before_the_function_times_out(
    harness: IngestHarness,
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What RDS Proxy holding a statement through a failover, or a path whose far end is gone
    # while something in between still acknowledges, look like: the server-side statement
    # timeout never starts and TCP_USER_TIMEOUT cannot fire.
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT_MS", "2000")
    assert _deliver_new(harness) == 202
    pg_proxy.set_blackhole(True)
    answer: list[int] = []
    started = time.monotonic()
    worker = threading.Thread(target=lambda: answer.append(_deliver_new(harness)), daemon=True)
    worker.start()
    worker.join(INGEST_TIMEOUT_S)
    elapsed = time.monotonic() - started
    pg_proxy.set_blackhole(False)
    worker.join(30)

    assert elapsed < INGEST_TIMEOUT_S, "Lambda would have killed ingest (API Gateway: 500)"
    assert answer == [503]
    assert elapsed < 2.0 + 1.5  # the statement timeout, plus the second the server had
    assert _deliver_new(harness) == 202  # and back at once when the database answers again
