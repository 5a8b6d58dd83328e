"""`webhook-inbox dev` as a user runs it: a subprocess, real HTTP, Ctrl-C, nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.dev_support import (
    DevProcess,
    post,
    processes_mentioning,
    session_processes,
    wait_until,
)
from tests.support import ROOT
from webhook_inbox.ingest import providers

SAMPLE = ROOT / "events" / "providers.local.json"


@pytest.fixture
def dev() -> Iterator[DevProcess]:
    process = DevProcess()
    try:
        yield process
    finally:
        if process.proc.poll() is None:  # the test failed before stopping it: do not leak
            os.killpg(process.proc.pid, signal.SIGKILL)
            process.proc.wait(timeout=10)
        process.remove_folder()


def test_dev_runs_the_pipeline_and_stops_cleanly_on_ctrl_c(dev: DevProcess) -> None:
    pg_dir = dev.wait_for(r"started a throwaway PostgreSQL in (\S+)")[1]
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")

    stripe = providers.load_config_text(SAMPLE.read_text())["stripe"]
    event_id = f"evt_e2e_{uuid.uuid4().hex[:8]}"
    body = json.dumps(
        {"id": event_id, "object": "event", "type": "customer.created", "created": int(time.time()),
         "data": {"object": {"id": "cus_e2e", "object": "customer"}}}
    ).encode()  # fmt: skip
    headers = providers.sign_delivery(stripe, body).headers
    url = f"http://127.0.0.1:{port}/webhooks/stripe"

    assert post(url, headers, body) == 202
    assert post(url, headers, body) == 200  # the duplicate
    forged = dict(headers, **{"Stripe-Signature": headers["Stripe-Signature"][:-4] + "0000"})
    assert post(url, forged, body.replace(b"cus_e2e", b"cus_evil")) == 401

    dev.wait_for(rf"stripe/{event_id} \[customer\.created\] .*-> processed", timeout=30)
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM webhook_events WHERE provider = 'stripe'"
        ).fetchone() == (1,)
        assert conn.execute(
            "SELECT delivery_count, status FROM webhook_events WHERE event_id = %s", (event_id,)
        ).fetchone() == (2, "processed")
        assert conn.execute("SELECT customer_id FROM customers").fetchall() == [("cus_e2e",)]
        assert conn.execute("SELECT topic FROM outbox_messages").fetchall() == [
            ("customer.created",)
        ]

    # The sweeper (every second here) publishes the handler's outbox message to the bus. The
    # console prints "published" when the bus has it, a moment before the sweeper commits
    # mark_published (issue 29: this test read the row in between on a loaded machine), so the
    # row's state is polled, and the console line checked after.
    def outbox_statuses() -> list[tuple[str]]:
        with psycopg.connect(database_url) as conn:
            return conn.execute("SELECT status FROM outbox_messages").fetchall()

    wait_until(lambda: outbox_statuses() == [("published",)], 30, "the outbox row published")
    dev.wait_for(r"outbox\s+\| published to webhook-inbox-dev: customer\.created", timeout=30)

    os.killpg(dev.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert dev.proc.wait(timeout=60) == 0
    dev.wait_for(r"dev\s+\| stopped", timeout=5)
    # Helper processes (multiprocessing's resource tracker) exit just after their parent.
    deadline = time.monotonic() + 5
    while session_processes(dev.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_processes(dev.proc.pid) == []
    assert processes_mentioning(pg_dir) == []
    assert not Path(pg_dir).exists()
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", port), timeout=2),
    ):
        pass
