"""The processor when things go wrong: handler errors, retries, leases, dead letters, outages."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.conftest import RetryQueue
from tests.integration.processing.helpers import (
    emitted_metrics,
    failures,
    invoke,
    row,
    sqs_event,
    sqs_event_for,
    store_event,
)
from tests.support import FakeLambdaContext
from webhook_inbox import config
from webhook_inbox.errors import RetryableEventError
from webhook_inbox.processing import batch as processing
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store import inbox, pauses
from webhook_inbox.store.inbox import LeasedEvent

SECRET = "card-4242-4242-secret-marker"


def customer_payload(customer_id: str, **extra: Any) -> dict[str, Any]:
    return {"data": {"object": {"id": customer_id}}, **extra}


def store_customers(conn: psycopg.Connection[Any], n: int) -> list[int]:
    return [
        store_event(conn, event_type="customer.created", payload=customer_payload(f"cus_{i}"))
        for i in range(n)
    ]


def db_now(conn: psycopg.Connection[Any]) -> Any:
    result = conn.execute("SELECT now()").fetchone()
    assert result is not None
    return result[0]


def make_due(conn: psycopg.Connection[Any], row_id: int) -> None:
    conn.execute("UPDATE webhook_events SET available_at = now() WHERE id = %s", (row_id,))


def expire_lease(conn: psycopg.Connection[Any], row_id: int) -> None:
    conn.execute(
        "UPDATE webhook_events SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (row_id,),
    )


def leaking_failure(conn: psycopg.Connection[Any], event: LeasedEvent) -> None:
    raise ValueError(f"cannot handle {json.dumps(event.payload)}")  # quotes the payload


def test_one_failing_event_in_ten_fails_alone_with_backoff_and_is_woken_by_sqs(  # noqa: PLR0917
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    retry_queue: RetryQueue,
    registry: dict[tuple[str, str], Any],
    log_output: io.StringIO,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry[("stripe", "invoice.paid")] = leaking_failure
    row_ids = store_customers(conn, 9)
    bad = store_event(conn, event_type="invoice.paid", payload={"secret": SECRET})
    row_ids.insert(4, bad)
    before = db_now(conn)

    response = invoke(processor, sqs_event_for(row_ids))

    # The wake-up went out with DelaySeconds, so SQS must not redeliver anything.
    assert failures(response) == []
    statuses = dict(conn.execute("SELECT id, status FROM webhook_events").fetchall())
    assert [statuses[i] for i in row_ids if i != bad] == ["processed"] * 9
    failed = row(conn, bad)
    assert failed["status"] == "failed"
    assert failed["attempts"] == 1
    assert failed["error_kind"] == "handler_error"
    assert failed["last_error"].startswith("ValueError in leaking_failure")
    assert SECRET not in failed["last_error"]
    # Attempt 1 with base 5 s: the delay is drawn from [2.5 s, 5 s].
    delay = failed["available_at"] - before
    assert timedelta(seconds=2.4) <= delay <= timedelta(seconds=5.5)
    [entry] = retry_queue.sent_entries()
    assert json.loads(entry["MessageBody"]) == {"id": bad}
    assert 4 <= entry["DelaySeconds"] <= 7
    assert failed["enqueued_at"] is not None
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (9,)
    # Metrics ride in the batch's summary line (EMF), one value per metric and batch.
    metrics = emitted_metrics(log_output.getvalue())
    assert metrics["Processed"] == [9.0]
    assert metrics["Failed"] == [1.0]
    assert metrics["Retried"] == [1.0]
    assert len(metrics["ProcessingLatency"]) == 9
    # Logs: a line per transition but processed, with ids and attempt, never the payload.
    lines = [json.loads(line) for line in log_output.getvalue().splitlines()]
    failed_line = next(line for line in lines if line["message"] == "failed")
    assert failed_line["row_id"] == bad
    assert failed_line["attempt"] == 1
    assert failed_line["event_type"] == "invoice.paid"
    assert "duration_ms" in failed_line
    [summary] = [line for line in lines if line["message"] == "batch"]
    assert (summary["records"], summary["leased"], summary["redelivered"]) == (10, 10, 0)
    # The processed ones are listed in the summary by row id (the row holds the rest).
    assert sorted(summary["processed"]) == sorted(i for i in row_ids if i != bad)
    assert SECRET not in log_output.getvalue()


def test_a_failed_event_whose_wake_up_cannot_be_sent_is_returned_to_sqs(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    retry_queue: RetryQueue,
    registry: dict[tuple[str, str], Any],
) -> None:
    registry[("stripe", "invoice.paid")] = leaking_failure
    good = store_customers(conn, 2)
    bad = store_event(conn, event_type="invoice.paid", payload={})
    retry_queue.client.delete_queue(QueueUrl=retry_queue.url)
    event = sqs_event_for([*good, bad])

    response = invoke(processor, event)

    assert failures(response) == [event["Records"][2]["messageId"]]
    assert row(conn, bad)["status"] == "failed"
    assert row(conn, bad)["enqueued_at"] is None  # the sweeper's backstop still sees it


def test_a_retry_longer_than_sqs_can_delay_is_left_to_the_sweeper(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    retry_queue: RetryQueue,
    registry: dict[tuple[str, str], Any],
) -> None:
    config.use(
        ProcessorSettings(
            queue_url=retry_queue.url,
            max_attempts=3,
            retry_base_seconds=2000,
            retry_max_seconds=3600,
        )
    )
    registry[("stripe", "invoice.paid")] = leaking_failure
    bad = store_event(conn, event_type="invoice.paid", payload={})

    assert failures(invoke(processor, sqs_event_for([bad]))) == []

    assert retry_queue.sent_entries() == []
    failed = row(conn, bad)
    assert failed["status"] == "failed"
    assert failed["enqueued_at"] is None


def test_a_statement_error_in_a_handler_fails_only_its_event(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
) -> None:
    def divides_by_zero(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        c.execute(
            "INSERT INTO customers (provider, customer_id, status) VALUES ('x', 'y', 'active')"
        )
        c.execute("SELECT 1 / 0")

    registry[("stripe", "invoice.paid")] = divides_by_zero
    bad = store_event(conn, event_type="invoice.paid", payload={})
    good = store_customers(conn, 2)

    assert failures(invoke(processor, sqs_event_for([bad, *good]))) == []

    failed = row(conn, bad)
    assert (failed["status"], failed["error_kind"]) == ("failed", "store_error")
    assert failed["last_error"] == "DivisionByZero: 22012"
    # Its own insert was rolled back with its savepoint; the others committed.
    assert conn.execute("SELECT customer_id FROM customers ORDER BY 1").fetchall() == [
        ("cus_0",),
        ("cus_1",),
    ]


def test_attempts_exhausted_go_to_dead_letter_with_a_metric(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    log_output: io.StringIO,
) -> None:
    # Poison: this event fails every time while the handler succeeds on the others. (A handler
    # failing on everything is an outage instead: its circuit holds the events, test_pauses.py.)
    def not_ready(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        if event.payload.get("poison"):
            raise RetryableEventError("upstream account not provisioned yet")

    registry[("stripe", "invoice.paid")] = not_ready
    row_id = store_event(conn, event_type="invoice.paid", payload={"poison": True})

    for attempt in (1, 2):  # MAX_ATTEMPTS is 3 in these tests
        assert failures(invoke(processor, sqs_event_for([row_id]))) == []
        assert (row(conn, row_id)["status"], row(conn, row_id)["attempts"]) == ("failed", attempt)
        healthy = store_event(conn, event_type="invoice.paid", payload={"n": attempt})
        invoke(processor, sqs_event_for([healthy]))  # the handler works: the run of failures ends
        pauses.release_resumed(conn)  # the sweeper: whatever its circuit held is due again
        make_due(conn, row_id)
    log_output.seek(0)
    log_output.truncate()
    assert failures(invoke(processor, sqs_event_for([row_id]))) == []

    dead = row(conn, row_id)
    assert (dead["status"], dead["attempts"], dead["error_kind"]) == ("dead_letter", 3, "retryable")
    assert dead["last_error"] == "upstream account not provisioned yet"
    assert emitted_metrics(log_output.getvalue())["DeadLettered"] == [1.0]


def test_an_unsupported_schema_version_is_dead_lettered_at_once(
    processor: ModuleType, conn: psycopg.Connection[Any], retry_queue: RetryQueue
) -> None:
    row_id = store_event(
        conn,
        provider="example",
        event_type="customer.created",
        payload={"schema_version": 2, "data": {"id": "cus_1"}},
    )
    assert failures(invoke(processor, sqs_event_for([row_id]))) == []
    dead = row(conn, row_id)
    assert (dead["status"], dead["attempts"], dead["error_kind"]) == ("dead_letter", 1, "permanent")
    assert dead["last_error"] == "unsupported schema_version 2"
    assert retry_queue.sent_entries() == []
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (0,)


@pytest.mark.parametrize(
    "case",
    [
        ("stripe", "customer.subscription.updated", {"created": 1}, "data.object.id"),
        ("stripe", "customer.subscription.updated",
         {"created": 1, "data": {"object": {"id": "sub_1"}}}, "data.object.status"),
        ("stripe", "customer.created", {"data": {"object": {}}}, "data.object.id"),
        ("example", "customer.created", {"data": {}}, "data.id"),
        ("example", "customer.deleted", {}, "data.id"),
        ("example", "subscription.updated", {"data": {"id": "sub_1", "status": "active"}},
         "data.version"),
    ],
)  # fmt: skip
def test_a_payload_missing_a_required_field_is_dead_lettered_at_once_naming_its_whole_path(
    processor: ModuleType, conn: psycopg.Connection[Any], case: tuple[str, str, Any, str]
) -> None:
    # The path as docs/local.md lists the handlers' fields, from the payload's root.
    provider, event_type, payload, path = case
    row_id = store_event(conn, provider=provider, event_type=event_type, payload=payload)
    assert failures(invoke(processor, sqs_event_for([row_id]))) == []
    dead = row(conn, row_id)
    assert (dead["status"], dead["last_error"]) == ("dead_letter", f"payload lacks {path}")


def test_an_event_type_without_a_handler_is_ignored_with_a_disposition(
    processor: ModuleType, conn: psycopg.Connection[Any], log_output: io.StringIO
) -> None:
    row_id = store_event(conn, event_type="charge.refunded", payload={"id": "evt_x"})
    assert failures(invoke(processor, sqs_event_for([row_id]))) == []
    ignored = row(conn, row_id)
    assert ignored["status"] == "ignored"
    assert ignored["disposition"] == "no handler registered for this provider and event type"
    assert emitted_metrics(log_output.getvalue())["Ignored"] == [1.0]


class SimulatedCrash(BaseException):
    """Stands for the runtime killing the invocation (timeout, out of memory)."""


def test_a_worker_that_dies_after_leasing_blocks_others_until_its_lease_expires(
    processor: ModuleType, conn: psycopg.Connection[Any], registry: dict[tuple[str, str], Any]
) -> None:
    real_handler = registry[("stripe", "customer.created")]
    crash_next = [True]

    def crashes_once(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        if crash_next.pop() if crash_next else False:
            raise SimulatedCrash
        real_handler(c, event)

    registry[("stripe", "customer.created")] = crashes_once
    [row_id] = store_customers(conn, 1)
    event = sqs_event_for([row_id])

    with pytest.raises(SimulatedCrash):
        invoke(processor, event, FakeLambdaContext(function_name="dying"))
    leased = row(conn, row_id)
    assert (leased["status"], leased["attempts"]) == ("processing", 1)
    assert leased["lease_owner"].startswith("dying:")
    assert leased["lease_expires_at"] > db_now(conn)

    # Another worker gets the redelivered message while the lease is live: it cannot take it.
    assert failures(invoke(processor, event)) == []
    assert row(conn, row_id)["lease_owner"] == leased["lease_owner"]
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (0,)

    expire_lease(conn, row_id)
    assert failures(invoke(processor, event)) == []
    done = row(conn, row_id)
    assert (done["status"], done["attempts"]) == ("processed", 2)  # both attempts counted
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (1,)


def test_no_time_left_leases_for_a_positive_time_then_hands_the_rows_back_unspent(
    processor: ModuleType, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    row_ids = store_customers(conn, 2)
    conn.execute(
        "UPDATE webhook_events SET status = 'failed', attempts = 3 WHERE id = %s", (row_ids[1],)
    )
    event = sqs_event_for(row_ids)
    leases: list[float] = []
    real_lease = processing.inbox.take_leases

    def recording_lease(*args: Any, lease_seconds: float, **kwargs: Any) -> Any:
        leases.append(lease_seconds)
        return real_lease(*args, lease_seconds=lease_seconds, **kwargs)

    monkeypatch.setattr(processing.inbox, "take_leases", recording_lease)
    response = invoke(processor, event, FakeLambdaContext(remaining_ms=0))

    # Remaining 0 s still gave a positive lease (the margin)...
    assert leases == [processing.MIN_LEASE_SECONDS]
    # ...but with no time to run a handler both records go back to SQS, and the rows are handed
    # back as they were: no attempt spent, no lease left to wait out.
    assert failures(response) == [r["messageId"] for r in event["Records"]]
    first, second = row(conn, row_ids[0]), row(conn, row_ids[1])
    assert (first["status"], first["attempts"], first["lease_owner"]) == ("received", 0, None)
    assert (second["status"], second["attempts"], second["lease_owner"]) == ("failed", 3, None)
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (0,)


def test_a_lease_lost_mid_handler_rolls_back_that_event_and_leaves_the_row_to_its_owner(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    database_url: str,
) -> None:
    real_handler = registry[("stripe", "customer.created")]

    def slow_handler(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        # While this handler is slow, its lease runs out and another worker takes the row.
        with psycopg.connect(database_url, autocommit=True) as other:
            expire_lease(other, event.id)
            assert inbox.lease_events(other, [event.id], owner="other-worker", lease_seconds=60)
        real_handler(c, event)

    registry[("stripe", "customer.created")] = slow_handler
    [row_id] = store_customers(conn, 1)

    assert failures(invoke(processor, sqs_event_for([row_id]))) == []

    taken = row(conn, row_id)
    assert (taken["status"], taken["lease_owner"], taken["attempts"]) == (
        "processing",
        "other-worker",
        2,
    )
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM outbox_messages").fetchone() == (0,)


def test_database_down_mid_batch_returns_every_record_and_marks_nothing_processed(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    registry: dict[tuple[str, str], Any],
    database_url: str,
) -> None:
    def kills_its_connection(c: psycopg.Connection[Any], event: LeasedEvent) -> None:
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (c.info.backend_pid,))
        c.execute("SELECT 1")

    registry[("stripe", "invoice.paid")] = kills_its_connection
    row_ids = store_customers(conn, 4)
    row_ids.insert(2, store_event(conn, event_type="invoice.paid", payload={}))
    event = sqs_event_for(row_ids)

    response = invoke(processor, event)

    assert failures(response) == [r["messageId"] for r in event["Records"]]
    assert conn.execute(
        "SELECT count(*) FROM webhook_events WHERE status = 'processed'"
    ).fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM outbox_messages").fetchone() == (0,)

    # Once the leases expire, the redelivered batch goes through on a fresh connection.
    registry[("stripe", "invoice.paid")] = lambda c, e: None
    for row_id in row_ids:
        expire_lease(conn, row_id)
    assert failures(invoke(processor, event)) == []
    assert conn.execute(
        "SELECT count(*) FROM webhook_events WHERE status = 'processed' AND attempts = 2"
    ).fetchone() == (5,)
    assert conn.execute("SELECT count(*) FROM customers").fetchone() == (4,)


def test_database_unreachable_returns_every_record(
    processor: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook_inbox.store import db

    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1")
    db.reset_for_tests()
    event = sqs_event_for([1, 2, 3])
    assert failures(invoke(processor, event)) == [r["messageId"] for r in event["Records"]]


def test_poison_messages_are_acknowledged_counted_and_logged(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    log_output: io.StringIO,
    capsys: pytest.CaptureFixture[str],
) -> None:
    [good] = store_customers(conn, 1)
    event = sqs_event(
        ["not json", json.dumps({"id": "7"}), json.dumps({"id": 999_999}), json.dumps({"id": good})]
    )

    response = invoke(processor, event)

    assert failures(response) == []  # redelivering them could never help
    assert row(conn, good)["status"] == "processed"
    assert emitted_metrics(log_output.getvalue())["PoisonMessages"] == [1.0, 1.0, 1.0]
    messages = [json.loads(line)["message"] for line in log_output.getvalue().splitlines()]
    assert messages.count("poison message acknowledged") == 2
    assert messages.count("unknown inbox id acknowledged") == 1
