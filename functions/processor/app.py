"""Processor Lambda: SQS batches of inbox ids → leased, transactional, idempotent handling.

Thin on purpose: the batch is processed as a unit by ``webhook_inbox.processing`` (one lease
statement, one transaction); Powertools then turns the per-record verdicts into the partial
batch response (``{"batchItemFailures": [...]}``, needs ``ReportBatchItemFailures``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from webhook_inbox import handlers, processing
from webhook_inbox.errors import RedeliveryRequested
from webhook_inbox_app.handlers import HANDLERS as APPLICATION_HANDLERS

handlers.install(APPLICATION_HANDLERS)  # the application's handlers (ApplicationLayer)
logger = processing.logger
metrics = processing.metrics
settings = processing.ProcessorSettings.from_env()  # parsed once per execution environment
# Every record may legitimately fail at once (database down): report them, do not raise.
batch_processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    messages = [
        processing.QueueMessage(message_id=record["messageId"], body=record.get("body", ""))
        for record in event.get("Records", [])
    ]
    redeliver = set(
        processing.process_messages(
            messages,
            owner=f"{context.function_name}:{context.aws_request_id}",
            remaining_ms=context.get_remaining_time_in_millis,
            settings=settings,
        )
    )

    def record_verdict(record: SQSRecord) -> None:
        # The one place a processing outcome becomes an SQS outcome: raising puts the record in
        # batchItemFailures, so SQS delivers it again; returning acknowledges (deletes) it.
        if record.message_id in redeliver:
            raise RedeliveryRequested(f"message {record.message_id} must be redelivered")

    response: dict[str, Any] = dict(
        process_partial_response(
            event=event, record_handler=record_verdict, processor=batch_processor, context=context
        )
    )
    return response
