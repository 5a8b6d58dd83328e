"""Processor Lambda: SQS batches of inbox ids → leased, transactional, idempotent handling.

Thin on purpose: the batch is processed as a unit by ``webhook_inbox.processing`` (one lease
statement, one transaction), which returns the records SQS must deliver again; this module turns
them into the partial batch response (``{"batchItemFailures": [...]}``, needs
``ReportBatchItemFailures``).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from webhook_inbox import aws, handlers, processing
from webhook_inbox.passes import EventResult
from webhook_inbox_app.handlers import HANDLERS as APPLICATION_HANDLERS

aws.use(aws.PROCESSOR)
handlers.install(APPLICATION_HANDLERS)  # the application's handlers (ApplicationLayer)
logger = processing.logger
metrics = processing.metrics
settings = processing.ProcessorSettings.from_env()  # parsed once per execution environment


_METRIC_OF = {
    "processed": "Processed",
    "failed": "Failed",
    "dead_letter": "DeadLettered",
    "ignored": "Ignored",
}


def observe(result: EventResult) -> None:
    """One log line per state transition (after the commit made it true) and its metric."""
    event = result.event
    fields: dict[str, Any] = {
        "event_row_id": event.id,
        "provider": event.provider,
        "provider_event_id": event.event_id,
        "event_type": event.event_type,
        "attempt": event.attempts,
        "duration_ms": result.duration_ms,
        "outcome": result.outcome,
    }
    if result.error_kind:
        fields["error_kind"] = result.error_kind
    if result.retry_delay_s is not None:
        fields["retry_in_s"] = round(result.retry_delay_s, 3)
    if result.latency is not None:
        latency_ms = result.latency.total_seconds() * 1000
        fields["latency_ms"] = round(latency_ms, 3)
        metrics.add_metric(name="ProcessingLatency", unit=MetricUnit.Milliseconds, value=latency_ms)
    metric = _METRIC_OF.get(result.outcome)
    if metric:
        metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    if result.outcome in {"processed", "ignored"}:
        logger.info(f"event {result.outcome}", extra=fields)
    else:
        logger.warning(f"event {result.outcome}", extra=fields)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    messages = [
        processing.QueueMessage(message_id=record["messageId"], body=record.get("body", ""))
        for record in event.get("Records", [])
    ]
    outcome = processing.process_messages(
        messages,
        owner=f"{context.function_name}:{context.aws_request_id}",
        remaining_ms=context.get_remaining_time_in_millis,
        settings=settings,
    )
    for result in outcome.results:
        observe(result)
    redeliver = set(outcome.redeliver)
    # The one place a processing outcome becomes an SQS outcome: a listed record is delivered
    # again; every other record is acknowledged (deleted). Every record may be listed at once
    # (database down): that is a valid answer, not an error.
    return {
        "batchItemFailures": [
            {"itemIdentifier": m.message_id} for m in messages if m.message_id in redeliver
        ]
    }
