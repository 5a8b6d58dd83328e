"""A message that arrives while another transaction holds its row's lock (ingest marking it
enqueued right after SendMessage, a duplicate delivery counting itself, a sweeper re-enqueueing
it) must come back from SQS, not be acknowledged: the chaos soak found such rows stranded in
``received`` until the sweeper's stale re-enqueue, 15 minutes later."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.integration.processor.helpers import (
    failures,
    invoke,
    row,
    sqs_event_for,
    store_event,
)
from tests.support import load_function


def test_a_received_row_locked_by_a_concurrent_writer_is_returned_to_sqs(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    processor = load_function("processor")
    row_id = store_event(
        conn, event_type="customer.created", payload={"data": {"object": {"id": "cus_locked"}}}
    )
    event = sqs_event_for([row_id])
    with psycopg.connect(database_url) as writer:
        # Ingest's duplicate-delivery count, caught mid-transaction.
        writer.execute(
            "UPDATE webhook_events SET delivery_count = delivery_count + 1 WHERE id = %s",
            (row_id,),
        )
        response = invoke(processor, event)
        assert failures(response) == [event["Records"][0]["messageId"]]
        assert row(conn, row_id)["status"] == "received"
    # The writer committed; the redelivered message now finds the row and processes it.
    assert failures(invoke(processor, event)) == []
    assert row(conn, row_id)["status"] == "processed"
    customers = conn.execute("SELECT customer_id FROM customers").fetchall()
    assert customers == [("cus_locked",)]
