"""The processor through the fault layer: the first batch after an idle period."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import psycopg

from tests.faults.proxy import FaultProxy
from tests.integration.processor.helpers import (
    failures,
    invoke,
    row,
    sqs_event_for,
    store_event,
    stripe_subscription_event,
)


def test_first_batch_after_the_idle_connection_was_closed_is_processed(
    processor: ModuleType,
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
) -> None:
    first = store_event(
        conn,
        event_type="customer.subscription.updated",
        payload=stripe_subscription_event("sub_1", created=1_700_000_000),
    )
    assert failures(invoke(processor, sqs_event_for([first]))) == []
    pg_proxy.idle_timeout_s = 0.2  # RDS Proxy's IdleClientTimeout, while the function is frozen
    deadline = time.monotonic() + 5
    while pg_proxy.idle_closed < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    pg_proxy.idle_timeout_s = None
    second = store_event(
        conn,
        event_type="customer.subscription.updated",
        payload=stripe_subscription_event("sub_2", created=1_700_000_001),
    )

    response = invoke(processor, sqs_event_for([second]))

    # Not returned to SQS for the 180 s visibility timeout: processed in this invocation.
    assert failures(response) == []
    assert row(conn, second)["status"] == "processed"
    assert row(conn, second)["attempts"] == 1
