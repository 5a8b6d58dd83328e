"""The dev console's DLQ line names the event whose wake-up moved there (issue 29 item 2: every
state change shows the event id and type), read from the real database."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg

from tests.integration.cli.conftest import seed_event
from webhook_inbox_tools.dev.console import Console


def test_a_wakeup_is_named_by_its_event(database_url: str, conn: psycopg.Connection[Any]) -> None:
    row_id = seed_event(conn, "evt_dlq_1", event_type="customer.created", status="failed")
    conn.commit()
    console = Console(
        database_url=database_url,
        region="us-east-1",
        endpoint="http://127.0.0.1:9",
        tap_url="",
        dlq_url="",
        bus_name="webhook-inbox-dev",
        max_receive_count=5,
        stopping=threading.Event(),
    )

    named = console.event_named(json.dumps({"id": row_id}))
    assert named == "stripe/evt_dlq_1 [customer.created] (failed)"
    # Whatever else arrives is shown as it is, never an error.
    assert (
        console.event_named(json.dumps({"id": row_id + 1000}))
        == f'message {{"id": {row_id + 1000}}}'
    )
    assert console.event_named("not json") == "message not json"
