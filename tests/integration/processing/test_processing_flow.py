"""The processor's happy paths: one commit per event, idempotence, ordering, concurrency."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.integration.processing.helpers import (
    failures,
    invoke,
    row,
    sqs_event_for,
    store_event,
    stripe_subscription_event,
)
from tests.support import FakeLambdaContext
from webhook_inbox.store import db


def count(conn: psycopg.Connection[Any], table: str) -> int:
    result = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608 - test tables
    assert result is not None
    return int(result[0])


def test_one_event_commits_domain_change_outbox_row_and_processed_mark_together(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    payload = stripe_subscription_event("sub_1", created=1_700_000_000)
    row_id = store_event(conn, event_type="customer.subscription.updated", payload=payload)

    response = invoke(processor, sqs_event_for([row_id]))

    assert failures(response) == []
    event = row(conn, row_id)
    assert event["status"] == "processed"
    assert event["attempts"] == 1
    assert event["lease_owner"] is None
    subscription = conn.execute(
        "SELECT status, provider_version, source_event_id, xmin::text FROM subscriptions"
    ).fetchall()
    assert subscription == [("active", 1_700_000_000, payload["id"], subscription[0][3])]
    outbox = conn.execute(
        "SELECT topic, deduplication_key, source_event_id, payload, xmin::text FROM outbox_messages"
    ).fetchall()
    assert len(outbox) == 1
    topic, key, source, message, outbox_xmin = outbox[0]
    assert (topic, key, source) == (
        "subscription.updated",
        f"stripe:{payload['id']}:subscription.updated",
        row_id,
    )
    assert message["subscription_id"] == "sub_1"
    assert message["version"] == 1_700_000_000
    # Same (sub)transaction id on all three rows: they were written by one savepoint and
    # committed by one commit.
    event_xmin = conn.execute(
        "SELECT xmin::text FROM webhook_events WHERE id = %s", (row_id,)
    ).fetchone()
    assert event_xmin == (subscription[0][3],)
    assert outbox_xmin == subscription[0][3]


def test_the_same_message_delivered_twice_changes_the_domain_once(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    payload = stripe_subscription_event("sub_1", created=1_700_000_000)
    row_id = store_event(conn, event_type="customer.subscription.updated", payload=payload)
    event = sqs_event_for([row_id])

    assert failures(invoke(processor, event)) == []
    assert failures(invoke(processor, event)) == []  # redelivery: acknowledged, nothing done

    assert count(conn, "subscriptions") == 1
    assert count(conn, "outbox_messages") == 1
    assert row(conn, row_id)["attempts"] == 1


def test_the_same_ids_in_two_concurrent_batches_are_applied_once(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row_ids = [
        store_event(
            conn,
            event_type="customer.created",
            payload={"id": f"evt_{i}", "data": {"object": {"id": f"cus_{i}"}}},
        )
        for i in range(10)
    ]
    # Two execution environments: each thread gets its own connection, as each Lambda would.
    local = threading.local()
    opened: list[psycopg.Connection[Any]] = []

    def per_thread_connection(application_name: str = "test") -> psycopg.Connection[Any]:
        if getattr(local, "conn", None) is None:
            local.conn = db.connect(database_url, application_name=application_name)
            opened.append(local.conn)
        connection: psycopg.Connection[Any] = local.conn
        return connection

    monkeypatch.setattr(db, "get_connection", per_thread_connection)
    # Powertools keeps one process-wide metric set; two threads flushing it would race (a Lambda
    # environment runs one invocation at a time). Metrics are not what this test is about.
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    barrier = threading.Barrier(2)

    def run_batch(order: list[int]) -> dict[str, Any]:
        event = sqs_event_for(order)
        barrier.wait(timeout=10)
        return invoke(processor, event, FakeLambdaContext())

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            responses = list(pool.map(run_batch, [row_ids, list(reversed(row_ids))]))
    finally:
        for connection in opened:
            connection.close()

    assert [failures(r) for r in responses] == [[], []]
    assert count(conn, "customers") == 10
    assert count(conn, "outbox_messages") == 10
    rows = conn.execute(
        "SELECT status, attempts, count(*) FROM webhook_events GROUP BY status, attempts"
    ).fetchall()
    assert rows == [("processed", 1, 10)]


def test_an_older_subscription_version_after_a_newer_one_changes_nothing(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    newer = stripe_subscription_event("sub_1", created=1_700_000_200, status="past_due")
    older = stripe_subscription_event("sub_1", created=1_700_000_100, status="active")
    same = stripe_subscription_event("sub_1", created=1_700_000_200, status="canceled")
    ids = [
        store_event(conn, event_type="customer.subscription.updated", payload=p)
        for p in (newer, older, same)
    ]

    for row_id in ids:  # one batch each, in arrival order: newest first
        assert failures(invoke(processor, sqs_event_for([row_id]))) == []

    assert conn.execute(
        "SELECT status, provider_version, source_event_id FROM subscriptions"
    ).fetchall() == [("past_due", 1_700_000_200, newer["id"])]
    assert conn.execute("SELECT source_event_id FROM outbox_messages").fetchall() == [(ids[0],)]
    assert [row(conn, i)["status"] for i in ids] == ["processed"] * 3


def test_a_newer_version_of_the_example_provider_wins(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    def sub(version: int, status: str) -> dict[str, Any]:
        return {
            "type": "subscription.updated",
            "data": {"id": "sub_9", "status": status, "version": version},
        }

    first = store_event(
        conn, provider="example", event_type="subscription.updated", payload=sub(1, "trialing")
    )
    second = store_event(
        conn, provider="example", event_type="subscription.updated", payload=sub(2, "active")
    )
    assert failures(invoke(processor, sqs_event_for([first, second]))) == []
    assert conn.execute("SELECT status, provider_version FROM subscriptions").fetchall() == [
        ("active", 2)
    ]
    assert count(conn, "outbox_messages") == 2


@pytest.mark.parametrize(
    ("provider", "data_of"),
    [
        ("stripe", lambda customer: {"data": {"object": {"id": customer}}}),
        ("example", lambda customer: {"data": {"id": customer}}),
    ],
)
def test_deleted_before_created_leaves_a_tombstone_and_the_late_create_is_a_no_op(
    processor: ModuleType, conn: psycopg.Connection[Any], provider: str, data_of: Any
) -> None:
    deleted = store_event(
        conn,
        provider=provider,
        event_type="customer.deleted",
        payload=data_of("cus_7"),
        event_id="evt_del",
    )
    created = store_event(
        conn,
        provider=provider,
        event_type="customer.created",
        payload=data_of("cus_7"),
        event_id="evt_new",
    )

    assert failures(invoke(processor, sqs_event_for([deleted]))) == []
    assert failures(invoke(processor, sqs_event_for([created]))) == []

    assert conn.execute(
        "SELECT status, created_event_id, deleted_event_id FROM customers"
    ).fetchall() == [("deleted", None, "evt_del")]
    messages = conn.execute("SELECT topic, payload FROM outbox_messages").fetchall()
    assert len(messages) == 1
    assert messages[0][0] == "customer.deleted"
    assert messages[0][1]["before_created"] is True
    assert row(conn, created)["status"] == "processed"  # handled: the policy made it a no-op


def test_created_then_deleted_deletes_the_customer(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    created = store_event(
        conn, event_type="customer.created", payload={"data": {"object": {"id": "cus_1"}}}
    )
    deleted = store_event(
        conn, event_type="customer.deleted", payload={"data": {"object": {"id": "cus_1"}}}
    )
    assert failures(invoke(processor, sqs_event_for([created, deleted]))) == []
    assert conn.execute("SELECT status FROM customers").fetchall() == [("deleted",)]
    topics = conn.execute("SELECT topic FROM outbox_messages ORDER BY id").fetchall()
    assert topics == [("customer.created",), ("customer.deleted",)]


def test_the_sam_local_fixture_is_a_batch_the_processor_accepts(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    from tests.support import load_event

    # The fixture names ids 1-3: rows stored before the inbox was partitioned (the old table's
    # ids; a partitioned inbox gives new rows ids that carry their day).
    for i in range(3):
        conn.execute(
            "INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256, payload)"
            " VALUES (%s, 'stripe', %s, 'customer.created', sha256(%s::bytea), %s)",
            (i + 1, f"evt_c{i}", f"c{i}".encode(), Jsonb({"data": {"object": {"id": f"c{i}"}}})),
        )
    event = load_event("sqs-batch")
    assert [json.loads(r["body"]) for r in event["Records"]] == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert failures(invoke(processor, event)) == []
    assert count(conn, "customers") == 3
