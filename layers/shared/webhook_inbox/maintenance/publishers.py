"""Where outbox messages go: an EventBridge bus (default) or an SNS topic.

Both destinations receive the same JSON document, which carries the message's deduplication key:

    {"deduplication_key": "<key>", "topic": "<topic>", "payload": <payload>}

A message published twice (the sweeper crashed after publishing and before marking it) therefore
arrives twice with the same key, and consumers drop the second copy by that key.

Publishers send in batches of at most ten entries and 256 KiB per call (the limit of both APIs)
and report per entry which messages were accepted, so one rejected entry never fails its batch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from webhook_inbox import aws, config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.settings import PublisherSettings
from webhook_inbox.store.outbox import OutboxMessage

if TYPE_CHECKING:
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef
    from mypy_boto3_sns.type_defs import (
        MessageAttributeValueTypeDef,
        PublishBatchRequestEntryTypeDef,
    )

MAX_ENTRIES_PER_CALL = 10
MAX_BYTES_PER_CALL = 256 * 1024
EVENT_SOURCE = "webhook-inbox"


@dataclass(frozen=True)
class PublishFailure:
    error: str
    # Retrying cannot help (the message can never fit the API's limits): dead now.
    permanent: bool = False


@dataclass
class PublishResult:
    published: list[int] = field(default_factory=list)
    failed: dict[int, PublishFailure] = field(default_factory=dict)
    # Not attempted because the caller asked to stop (its time budget ran out).
    not_attempted: list[int] = field(default_factory=list)


class Publisher(Protocol):
    destination: str

    def publish(
        self, messages: Sequence[OutboxMessage], *, keep_going: Callable[[], bool]
    ) -> PublishResult: ...


def message_document(message: OutboxMessage) -> str:
    """The JSON both destinations carry (see the module docstring)."""
    return json.dumps(
        {
            "deduplication_key": message.deduplication_key,
            "topic": message.topic,
            "payload": message.payload,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def aws_error_text(exc: BotoCoreError | ClientError) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'ClientError')}: {error.get('Message', '')}"
    return type(exc).__name__


def _size_batches(
    entries: Sequence[tuple[int, Any, int]],
) -> Iterator[list[tuple[int, Any, int]]]:
    """Group (id, entry, size) into calls of at most ten entries and 256 KiB."""
    batch: list[tuple[int, Any, int]] = []
    batch_bytes = 0
    for item in entries:
        size = item[2]
        full = len(batch) == MAX_ENTRIES_PER_CALL or batch_bytes + size > MAX_BYTES_PER_CALL
        if batch and full:
            yield batch
            batch, batch_bytes = [], 0
        batch.append(item)
        batch_bytes += size
    if batch:
        yield batch


class _BatchingPublisher:
    """Shared batching, oversize and whole-call failure handling; subclasses send one call."""

    destination = "abstract"

    def _entry(self, message: OutboxMessage) -> tuple[Any, int]:
        raise NotImplementedError

    def _send(self, batch: list[tuple[int, Any, int]], result: PublishResult) -> None:
        raise NotImplementedError

    def publish(
        self, messages: Sequence[OutboxMessage], *, keep_going: Callable[[], bool]
    ) -> PublishResult:
        result = PublishResult()
        sendable: list[tuple[int, Any, int]] = []
        for message in messages:
            entry, size = self._entry(message)
            if size > MAX_BYTES_PER_CALL:
                result.failed[message.id] = PublishFailure(
                    f"message is {size} bytes; {self.destination} accepts at most "
                    f"{MAX_BYTES_PER_CALL}",
                    permanent=True,
                )
            else:
                sendable.append((message.id, entry, size))
        for batch in _size_batches(sendable):
            if not keep_going():
                result.not_attempted.extend(item[0] for item in batch)
                continue
            try:
                self._send(batch, result)
            except (BotoCoreError, ClientError) as exc:
                # The whole call failed (throttled, unreachable, timed out). A timeout may hide a
                # call that succeeded: the retry then republishes under the same key.
                error = aws_error_text(exc)
                for message_id, _, _ in batch:
                    result.failed[message_id] = PublishFailure(error)
        return result


class EventBridgePublisher(_BatchingPublisher):
    """PutEvents to a bus: source ``webhook-inbox``, detail-type = the message's topic."""

    destination = "eventbridge"

    def __init__(self, client: Any, *, event_bus_name: str) -> None:
        self._client = client
        self._bus = event_bus_name

    def _entry(self, message: OutboxMessage) -> tuple[PutEventsRequestEntryTypeDef, int]:
        detail = message_document(message)
        entry: PutEventsRequestEntryTypeDef = {
            "Source": EVENT_SOURCE,
            "DetailType": message.topic,
            "Detail": detail,
            "EventBusName": self._bus,
        }
        # EventBridge's own entry-size rule: the UTF-8 bytes of Source, DetailType and Detail.
        size = sum(len(s.encode()) for s in (EVENT_SOURCE, message.topic, detail))
        return entry, size

    def _send(self, batch: list[tuple[int, Any, int]], result: PublishResult) -> None:
        response = self._client.put_events(Entries=[entry for _, entry, _ in batch])
        # Result entries come back in request order: the n-th answers the n-th entry.
        for (message_id, _, _), answer in zip(batch, response["Entries"], strict=True):
            if answer.get("EventId") and not answer.get("ErrorCode"):
                result.published.append(message_id)
            else:
                result.failed[message_id] = PublishFailure(
                    f"{answer.get('ErrorCode', 'Unknown')}: {answer.get('ErrorMessage', '')}"
                )


class SnsPublisher(_BatchingPublisher):
    """PublishBatch to a topic; the key travels in the body and as a message attribute.

    Standard topics have no deduplication of their own. On a FIFO topic (ARN ending ``.fifo``)
    the key's SHA-256 also becomes ``MessageDeduplicationId`` (SNS allows 128 characters, keys
    may have 512), so SNS itself drops a republish within its five-minute window.
    """

    destination = "sns"

    def __init__(self, client: Any, *, topic_arn: str) -> None:
        self._client = client
        self._topic_arn = topic_arn
        self._fifo = topic_arn.endswith(".fifo")

    def _entry(self, message: OutboxMessage) -> tuple[PublishBatchRequestEntryTypeDef, int]:
        body = message_document(message)
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            "deduplication_key": {"DataType": "String", "StringValue": message.deduplication_key},
            "topic": {"DataType": "String", "StringValue": message.topic},
        }
        entry: PublishBatchRequestEntryTypeDef = {
            "Id": str(message.id),
            "Message": body,
            "MessageAttributes": attributes,
        }
        if self._fifo:
            digest = hashlib.sha256(message.deduplication_key.encode()).hexdigest()
            entry["MessageDeduplicationId"] = digest
            entry["MessageGroupId"] = message.topic[:128]
        size = len(body.encode()) + sum(
            len(name.encode()) + len(value["DataType"]) + len(value.get("StringValue", "").encode())
            for name, value in attributes.items()
        )
        return entry, size

    def _send(self, batch: list[tuple[int, Any, int]], result: PublishResult) -> None:
        response = self._client.publish_batch(
            TopicArn=self._topic_arn, PublishBatchRequestEntries=[entry for _, entry, _ in batch]
        )
        for success in response.get("Successful", []):
            result.published.append(int(success["Id"]))
        for failure in response.get("Failed", []):
            result.failed[int(failure["Id"])] = PublishFailure(
                f"{failure.get('Code', 'Unknown')}: {failure.get('Message', '')}"
            )


def from_env(
    environ: Mapping[str, str] | None = None,
    *,
    make_client: Callable[[str], Any] = aws.client,
) -> Publisher:
    """The publisher OUTBOX_DESTINATION names (``eventbridge`` by default, or ``sns``): the
    execution environment's settings (:func:`webhook_inbox.config.current`), or ``environ``'s."""
    if environ is None:
        settings = config.current(PublisherSettings)
    else:
        settings = config.load(PublisherSettings, environ)
    destination = settings.destination.lower()
    if destination == "eventbridge":
        return EventBridgePublisher(make_client("events"), event_bus_name=settings.event_bus_name)
    if destination == "sns":
        if not settings.topic_arn:
            raise ConfigurationError("OUTBOX_DESTINATION=sns needs OUTBOX_TOPIC_ARN")
        return SnsPublisher(make_client("sns"), topic_arn=settings.topic_arn)
    raise ConfigurationError(
        f"OUTBOX_DESTINATION must be 'eventbridge' or 'sns', got {destination!r}"
    )
