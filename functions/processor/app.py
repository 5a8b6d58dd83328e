"""Processor Lambda: SQS batches of inbox ids → leased, transactional, idempotent handling.

Thin on purpose: the batch is processed as a unit by ``webhook_inbox.processing`` (one lease
statement, one transaction), which returns the records SQS must deliver again; this module turns
them into the partial batch response (``{"batchItemFailures": [...]}``, needs
``ReportBatchItemFailures``).
"""

from __future__ import annotations

from typing import Any

from webhook_inbox import aws, handlers, processing
from webhook_inbox_app.handlers import HANDLERS as APPLICATION_HANDLERS

aws.use(aws.PROCESSOR)
handlers.install(APPLICATION_HANDLERS)  # the application's handlers (ApplicationLayer)
logger = processing.logger
metrics = processing.metrics
settings = processing.ProcessorSettings.from_env()  # parsed once per execution environment


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
    # The one place a processing outcome becomes an SQS outcome: a listed record is delivered
    # again; every other record is acknowledged (deleted). Every record may be listed at once
    # (database down): that is a valid answer, not an error.
    return {
        "batchItemFailures": [
            {"itemIdentifier": m.message_id} for m in messages if m.message_id in redeliver
        ]
    }
