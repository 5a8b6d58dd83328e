"""The processor through the fault layer: the first batch after an idle period, and an SQS
endpoint that accepts the connection and never answers (issue 14, defects 1 and 3)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import psycopg
import pytest

from tests.faults.fixtures import MotoEndpoint
from tests.faults.proxy import FaultProxy
from tests.integration.processing.helpers import (
    failures,
    invoke,
    row,
    sqs_event_for,
    store_event,
    stripe_subscription_event,
)
from tests.support import FakeLambdaContext, load_function
from webhook_inbox import aws

PROCESSOR_TIMEOUT_S = 30.0  # template: ProcessorFunction Timeout


def _subscription_update(conn: psycopg.Connection[Any], n: int) -> int:
    return store_event(
        conn,
        event_type="customer.subscription.updated",
        payload=stripe_subscription_event(f"sub_{n}", created=1_700_000_000 + n),
    )


def test_first_batch_after_the_idle_connection_was_closed_is_processed(
    processor: ModuleType,
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
) -> None:
    first = _subscription_update(conn, 1)
    assert failures(invoke(processor, sqs_event_for([first]))) == []
    pg_proxy.idle_timeout_s = 0.2  # RDS Proxy's IdleClientTimeout, while the function is frozen
    deadline = time.monotonic() + 5
    while pg_proxy.idle_closed < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    pg_proxy.idle_timeout_s = None
    second = _subscription_update(conn, 2)

    response = invoke(processor, sqs_event_for([second]))

    # Not returned to SQS for the 180 s visibility timeout: processed in this invocation.
    assert failures(response) == []
    assert row(conn, second)["status"] == "processed"
    assert row(conn, second)["attempts"] == 1


@pytest.fixture
def processor_on_moto_server(
    database_url: str,
    moto_endpoint: MotoEndpoint,
    registry: dict[tuple[str, str], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[ModuleType]:
    """The processor function with its real SQS client, against a moto server behind the proxy."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint.url)
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint.url)
    monkeypatch.setenv("PROCESSING_QUEUE_URL", sqs.create_queue(QueueName="retries")["QueueUrl"])
    monkeypatch.setenv("RETRY_BASE_SECONDS", "5")
    module = load_function("processor")  # chooses the processor's AWS call limits
    yield module
    aws.use(aws.DEFAULT)
    aws.reset()


def test_a_retry_wake_up_to_an_sqs_that_never_answers_ends_within_the_budget(
    processor_on_moto_server: ModuleType,
    moto_endpoint: MotoEndpoint,
    registry: dict[tuple[str, str], Any],
    conn: psycopg.Connection[Any],
) -> None:
    def fails(_conn: psycopg.Connection[Any], _event: Any) -> None:
        raise RuntimeError("retry me")

    registry[("stripe", "invoice.paid")] = fails
    bad = store_event(conn, event_type="invoice.paid", payload={})
    event = sqs_event_for([bad])
    moto_endpoint.proxy.set_blackhole(True)  # accepts the connection, never answers
    answer: list[dict[str, Any]] = []
    started = time.monotonic()
    worker = threading.Thread(
        target=lambda: answer.append(invoke(processor_on_moto_server, event)), daemon=True
    )
    worker.start()
    worker.join(PROCESSOR_TIMEOUT_S)
    elapsed = time.monotonic() - started
    moto_endpoint.proxy.set_blackhole(False)
    worker.join(120)  # (on the old code: botocore's 60 s read timeout, once the hang is lifted)

    assert elapsed < PROCESSOR_TIMEOUT_S, "Lambda would have killed the invocation"
    # The failure is committed; the wake-up was not sent, so SQS redelivers the record instead.
    assert failures(answer[0]) == [event["Records"][0]["messageId"]]
    assert row(conn, bad)["status"] == "failed"


def test_a_database_that_never_answers_hands_the_batch_back_before_the_invocation_ends(
    processor: ModuleType,
    faulty_database_url: str,
    pg_proxy: FaultProxy,
    conn: psycopg.Connection[Any],
) -> None:
    first = _subscription_update(conn, 1)
    assert failures(invoke(processor, sqs_event_for([first]))) == []
    second = _subscription_update(conn, 2)
    event = sqs_event_for([second])
    pg_proxy.set_blackhole(True)
    context = FakeLambdaContext(remaining_ms=4000)
    answer: list[dict[str, Any]] = []
    started = time.monotonic()
    worker = threading.Thread(
        target=lambda: answer.append(invoke(processor, event, context)), daemon=True
    )
    worker.start()
    worker.join(context.remaining_ms / 1000)
    elapsed = time.monotonic() - started
    pg_proxy.set_blackhole(False)
    worker.join(30)

    assert elapsed < context.remaining_ms / 1000, "Lambda would have killed the invocation"
    assert failures(answer[0]) == [event["Records"][0]["messageId"]]  # SQS delivers it again
