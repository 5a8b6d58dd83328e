"""A `received` row the lease skipped because another statement held its lock is redelivered.

Found by the `webhook-inbox dev` end-to-end test: the processor received the wake-up while
another statement (then ingest's post-send mark; still possible with a duplicate delivery's
claim) held the row lock, SKIP LOCKED skipped the row, and the message was acknowledged —
leaving the event `received` until the sweeper's stale re-enqueue.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.helpers import failures, invoke, row, sqs_event_for, store_event


@pytest.mark.parametrize("status", ["received", "failed"])
def test_claimable_row_locked_by_another_statement_is_redelivered(
    processor: ModuleType, conn: psycopg.Connection[Any], database_url: str, status: str
) -> None:
    row_id = store_event(
        conn,
        event_type="customer.created",
        payload={"id": "evt_locked", "data": {"object": {"id": "cus_locked"}}},
    )
    # A failed row that is due is as claimable as a received one.
    conn.execute("UPDATE webhook_events SET status = %s WHERE id = %s", (status, row_id))
    locked, release = threading.Event(), threading.Event()

    def duplicate_delivery_counting() -> None:
        with psycopg.connect(database_url) as own, own.transaction():
            own.execute(
                "UPDATE webhook_events SET delivery_count = delivery_count + 1 WHERE id = %s",
                (row_id,),
            )
            locked.set()
            release.wait(timeout=30)

    thread = threading.Thread(target=duplicate_delivery_counting)
    thread.start()
    try:
        assert locked.wait(timeout=10)
        event = sqs_event_for([row_id])
        response = invoke(processor, event)
    finally:
        release.set()
        thread.join(timeout=10)

    assert failures(response) == [event["Records"][0]["messageId"]]
    assert row(conn, row_id)["status"] == status

    retried = invoke(processor, sqs_event_for([row_id]))
    assert failures(retried) == []
    assert row(conn, row_id)["status"] == "processed"
