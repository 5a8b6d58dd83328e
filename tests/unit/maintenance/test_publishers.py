"""Publisher batching without AWS: ten entries and 256 KiB per call, per-entry outcomes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.maintenance.publishers import (
    EventBridgePublisher,
    SnsPublisher,
    from_env,
    message_document,
)
from webhook_inbox.store.outbox import OutboxMessage


def _message(n: int, payload: Any = None) -> OutboxMessage:
    return OutboxMessage(
        id=n,
        topic="customer.welcome",
        deduplication_key=f"key-{n}",
        payload={"n": n} if payload is None else payload,
        attempts=1,
        source_event_id=None,
    )


class AcceptingEvents:
    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(Entries)
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "e"} for _ in Entries]}


def _always() -> bool:
    return True


def test_message_document_is_the_contract_consumers_rely_on() -> None:
    assert json.loads(message_document(_message(7))) == {
        "deduplication_key": "key-7",
        "topic": "customer.welcome",
        "payload": {"n": 7},
    }


def test_at_most_ten_entries_per_call() -> None:
    client = AcceptingEvents()
    result = EventBridgePublisher(client, event_bus_name="bus").publish(
        [_message(n) for n in range(25)], keep_going=_always
    )
    assert [len(c) for c in client.calls] == [10, 10, 5]
    assert sorted(result.published) == list(range(25))
    assert all(e["EventBusName"] == "bus" for call in client.calls for e in call)


def test_calls_stay_under_256_kib() -> None:
    client = AcceptingEvents()
    big = [_message(n, {"blob": "x" * 100_000}) for n in range(5)]
    EventBridgePublisher(client, event_bus_name="b").publish(big, keep_going=_always)
    assert [len(c) for c in client.calls] == [2, 2, 1]
    for call in client.calls:
        assert sum(len(e["Detail"]) + len(e["Source"]) + len(e["DetailType"]) for e in call) <= (
            256 * 1024
        )


def test_a_message_over_the_limit_is_a_permanent_failure_and_never_sent() -> None:
    client = AcceptingEvents()
    result = EventBridgePublisher(client, event_bus_name="b").publish(
        [_message(1), _message(2, {"blob": "x" * 300_000})], keep_going=_always
    )
    assert result.published == [1]
    assert result.failed[2].permanent
    assert [len(c) for c in client.calls] == [1]


def test_calls_stop_when_the_caller_runs_out_of_time() -> None:
    client = AcceptingEvents()
    answers = iter([True, False, False])
    result = EventBridgePublisher(client, event_bus_name="b").publish(
        [_message(n) for n in range(25)], keep_going=lambda: next(answers)
    )
    assert len(result.published) == 10
    assert sorted(result.not_attempted) == list(range(10, 25))


def test_sns_standard_topic_has_no_fifo_fields() -> None:
    class AcceptingSns:
        entries: list[dict[str, Any]] = []

        def publish_batch(self, TopicArn: str, PublishBatchRequestEntries: Any) -> Any:
            self.entries += PublishBatchRequestEntries
            return {"Successful": [{"Id": e["Id"]} for e in PublishBatchRequestEntries]}

    client = AcceptingSns()
    result = SnsPublisher(client, topic_arn="arn:aws:sns:us-east-1:1:t").publish(
        [_message(1)], keep_going=_always
    )
    assert result.published == [1]
    [entry] = client.entries
    assert "MessageDeduplicationId" not in entry
    assert entry["MessageAttributes"]["deduplication_key"]["StringValue"] == "key-1"


def test_from_env_defaults_to_the_default_event_bus() -> None:
    made: list[str] = []

    def make_client(service: str) -> Any:
        made.append(service)
        return AcceptingEvents()

    publisher = from_env({}, make_client=make_client)
    assert isinstance(publisher, EventBridgePublisher)
    assert publisher.destination == "eventbridge"
    assert made == ["events"]


def test_from_env_sns_needs_a_topic_and_unknown_destinations_fail() -> None:
    with pytest.raises(ConfigurationError, match="OUTBOX_TOPIC_ARN"):
        from_env({"OUTBOX_DESTINATION": "sns"}, make_client=lambda s: None)
    with pytest.raises(ConfigurationError, match="OUTBOX_DESTINATION"):
        from_env({"OUTBOX_DESTINATION": "kafka"}, make_client=lambda s: None)
    sns = from_env(
        {"OUTBOX_DESTINATION": "sns", "OUTBOX_TOPIC_ARN": "arn:aws:sns:us-east-1:1:t"},
        make_client=lambda s: None,
    )
    assert sns.destination == "sns"
