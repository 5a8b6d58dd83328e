"""The sweeper's re-wake messages carry several row ids; old single-id messages still work.

Issue 24, item 2: a re-wake (``{"ids": [...]}``) wakes rows sent long ago that are still waiting;
most of them still have their own ``{"id": N}`` message queued, some are done already. The
processor leases what is claimable among all the ids of a batch, acknowledges the rest, and hands
a message back to SQS when any of its rows must be redelivered.
"""

from __future__ import annotations

import json
import threading
from types import ModuleType
from typing import Any

import psycopg

from tests.integration.processing.helpers import failures, invoke, row, sqs_event, store_event
from tests.integration.processing.test_processing_failures import store_customers
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing.batch import QueueMessage
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store.inbox import LeasedEvent


def test_a_re_wake_and_single_id_messages_in_one_batch_process_each_row_once(
    processor: ModuleType, conn: psycopg.Connection[Any]
) -> None:
    waiting, done, also_waiting, alone = store_customers(conn, 4)
    assert failures(invoke(processor, sqs_event([json.dumps({"id": done})]))) == []
    done_at = row(conn, done)["processed_at"]
    event = sqs_event(
        [
            json.dumps({"ids": [waiting, done, also_waiting]}),
            json.dumps({"id": alone}),  # a message from before the deploy, or ingest's
            json.dumps({"id": waiting}),  # the row's own wake-up, in the same batch
        ]
    )

    assert failures(invoke(processor, event)) == []  # before: the re-wake was poison

    for row_id in (waiting, also_waiting, alone):
        assert (row(conn, row_id)["status"], row(conn, row_id)["attempts"]) == ("processed", 1)
    assert row(conn, done)["processed_at"] == done_at  # not run again
    customers = conn.execute("SELECT count(*) FROM customers").fetchone()
    assert customers == (4,)


def test_a_re_wake_with_a_row_to_redeliver_comes_back_whole(
    processor: ModuleType, conn: psycopg.Connection[Any], database_url: str
) -> None:
    free, locked_row, other = store_customers(conn, 3)
    locked, release = threading.Event(), threading.Event()

    def duplicate_delivery_counting() -> None:
        with psycopg.connect(database_url) as own, own.transaction():
            own.execute(
                "UPDATE webhook_events SET delivery_count = delivery_count + 1 WHERE id = %s",
                (locked_row,),
            )
            locked.set()
            release.wait(timeout=30)

    thread = threading.Thread(target=duplicate_delivery_counting)
    thread.start()
    try:
        assert locked.wait(timeout=10)
        event = sqs_event([json.dumps({"ids": [free, locked_row]}), json.dumps({"id": other})])
        response = invoke(processor, event)
    finally:
        release.set()
        thread.join(timeout=10)

    # The locked row is claimable, so its message must come back; the free row's work stands.
    assert failures(response) == [event["Records"][0]["messageId"]]
    assert [row(conn, r)["status"] for r in (free, locked_row, other)] == [
        "processed",
        "received",
        "processed",
    ]
    again = sqs_event([event["Records"][0]["body"]])
    assert failures(invoke(processor, again)) == []
    assert row(conn, locked_row)["status"] == "processed"
    assert row(conn, free)["attempts"] == 1


def test_re_wakes_cut_short_by_time_come_back_only_for_the_rows_not_run(
    conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    ran: list[int] = []

    def counted(_conn: psycopg.Connection[Any], event: LeasedEvent) -> None:
        ran.append(event.id)

    registry[("stripe", "invoice.paid")] = counted
    ids = [
        store_event(conn, event_type="invoice.paid", payload={"n": n}, event_id=f"evt_{n}")
        for n in range(9)
    ]
    messages = [
        QueueMessage(f"m{n}", json.dumps({"ids": ids[start : start + 3]}))
        for n, start in enumerate(range(0, 9, 3))
    ]

    # The invocation's time runs out after four handlers (its remaining time drops to zero).
    outcome = processing.process_messages(
        messages,
        owner="processor-under-test",
        remaining_ms=lambda: 0 if len(ran) >= 4 else 60_000,
        settings=ProcessorSettings(queue_url=""),
    )

    status = {i: (row(conn, i)["status"], row(conn, i)["attempts"]) for i in ids}
    done = {i for i, (s, _) in status.items() if s == "processed"}
    assert 0 < len(done) < len(ids)
    # A row not finished is handed back untouched (attempt returned) and its message comes back.
    assert all(status[i] == ("received", 0) for i in set(ids) - done)
    expected = [m.message_id for m in messages if not done.issuperset(json.loads(m.body)["ids"])]
    assert outcome.redeliver == expected
