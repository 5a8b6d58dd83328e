"""Processor Lambda: SQS batches of inbox ids → leased, transactional, idempotent handling.

Thin on purpose: the batch is processed by ``webhook_inbox.processing.batch`` (its rows leased at
most ten at a time, each in one autocommit statement; a chunk's handlers and marks commit in one
transaction, a suspect row's in its own), which returns the records SQS must deliver again; this
module turns them into the partial batch response (``{"batchItemFailures": [...]}``, needs
``ReportBatchItemFailures``).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from webhook_inbox import aws, config, idle_ledger, observability
from webhook_inbox.errors import SecretUnavailable
from webhook_inbox.processing import batch, handler_keys, handlers, pacing
from webhook_inbox.processing.passes import EventResult
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.wakeups import parse_body
from webhook_inbox_app import handlers as application

APPLICATION_HANDLERS = application.HANDLERS
aws.use(aws.PROCESSOR)
handlers.install(APPLICATION_HANDLERS)  # the application's handlers (ApplicationLayer)
pacing.install(getattr(application, "PACING", {}))  # its optional limits per handler key
logger = batch.logger
metrics = batch.metrics
# Once per execution environment: a key that can never match would end its events `ignored`.
for _problem in handler_keys.cold_start_problems(APPLICATION_HANDLERS):
    logger.warning("handler key never matches", extra={"key": str(_problem)})


# Built on first use and kept for the execution environment (not at import, so tests can set
# the environment first): the settings by webhook_inbox.config, the clients by webhook_inbox.aws.
# The longest a processor invocation writes after its activity mark: its 30 s timeout, rounded
# up (the leases it leaves behind are the database's to report: maintenance/idle.py).
PROCESSOR_HORIZON_S = 35.0


def settings() -> ProcessorSettings:
    return config.current(ProcessorSettings)


_METRIC_OF = {
    "processed": "Processed",
    "failed": "Failed",
    "dead_letter": "DeadLettered",
    "ignored": "Ignored",
    "deferred": "Paced",
}


def observe(result: EventResult, latencies_ms: list[int]) -> int | None:
    """Log one state transition (true once committed), named after its outcome.

    A processed event, the common case, gets no line of its own: its row id is returned for the
    batch's summary line (a few bytes instead of a 165-byte line). The row holds the rest
    (provider, event id, attempts, processed_at), and ingest's line pairs the event id with the
    row id, so the summary names the row and nothing the row already says. Every other
    transition gets one compact line: the row id, provider, event id and attempt, the event's
    type, duration and cause. The Lambda context is never repeated: the summary carries the
    request id once. The event's latency, if it has one, goes to ``latencies_ms`` (the batch's
    ProcessingLatency values, added to the metrics together).
    """
    event = result.event
    if result.latency is not None:
        # Whole milliseconds: the dashboard's average and maximum need no finer grain.
        latencies_ms.append(round(result.latency.total_seconds() * 1000))
    if result.outcome == "processed":
        return event.id
    if result.outcome == "deferred":
        return None  # by design, and possibly many: counted (Paced), never one line each
    fields: dict[str, Any] = {
        "row_id": event.id,
        "provider": event.provider,
        "event_id": event.event_id,
        "attempt": event.attempts,
        "event_type": event.event_type,
        "duration_ms": round(result.duration_ms, 1),
    }
    if result.error_kind:
        fields["error_kind"] = result.error_kind
    if result.retry_delay_s is not None:
        fields["retry_in_s"] = round(result.retry_delay_s, 3)
    if result.outcome == "ignored":
        logger.info(result.outcome, extra=fields)
    else:
        logger.warning(result.outcome, extra=fields)
    return None


def process(messages: list[batch.QueueMessage], context: Any) -> batch.BatchOutcome:
    """The batch's outcome; an unreadable database secret hands the whole batch back.

    That is not the invocation's failure (which ``ProcessorErrors`` would page for): SQS
    delivers the batch again, and the line ingest writes for the same cause (``unavailable``,
    reason ``secret``) and its ``SecretUnavailable`` count page once, through that alarm.
    """
    configured = settings()
    # Announce the batch's writes before them (docs/design.md, "Idle means idle"): the sweeper
    # then looks at the database after they end. A failed mark does not hold the batch back.
    failed = idle_ledger.mark_activity(configured.idle_ledger_bucket, horizon_s=PROCESSOR_HORIZON_S)
    if failed:
        logger.warning("activity mark failed", extra={"reason": failed})
    try:
        return batch.process_messages(
            messages,
            owner=f"{context.function_name}:{context.aws_request_id}",
            remaining_ms=context.get_remaining_time_in_millis,
            settings=configured,
        )
    except SecretUnavailable as exc:
        metrics.add_metric(name="SecretUnavailable", unit=MetricUnit.Count, value=1)
        logger.error(
            "unavailable",
            extra={"reason": "secret", "detail": str(exc), "request_id": context.aws_request_id},
        )
        # A body that is no wake-up was acknowledged (and counted) already: not handed back.
        wakeups = [m.message_id for m in messages if parse_body(m.body) is not None]
        return batch.BatchOutcome(batch.hand_back(messages, wakeups, settings()), [])


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    started = time.perf_counter()
    messages = [
        batch.QueueMessage(
            message_id=record["messageId"],
            body=record.get("body", ""),
            receive_count=int(record.get("attributes", {}).get("ApproximateReceiveCount", 1)),
        )
        for record in event.get("Records", [])
    ]
    summary: dict[str, Any] = {"request_id": context.aws_request_id, "records": len(messages)}
    try:
        outcome = process(messages, context)
        latencies_ms: list[int] = []
        processed = [
            row for result in outcome.results if (row := observe(result, latencies_ms)) is not None
        ]
        observability.add_metric_values(
            metrics, name="ProcessingLatency", unit=MetricUnit.Milliseconds, values=latencies_ms
        )
        if processed:
            summary["processed"] = processed
        for outcome_name, n in Counter(r.outcome for r in outcome.results).items():
            if outcome_name in _METRIC_OF:  # one value per metric and batch, not one per event
                metrics.add_metric(name=_METRIC_OF[outcome_name], unit=MetricUnit.Count, value=n)
        redeliver = set(outcome.redeliver)
        summary.update(leased=len(outcome.results), redelivered=len(redeliver))
    finally:
        # One summary per batch, whatever happened: the invocation's context once, the batch's
        # counts, its processed events, and every metric gathered in it (EMF), library ones
        # (PoisonMessages, Retried) included.
        summary["duration_ms"] = round((time.perf_counter() - started) * 1000, 1)
        logger.info("batch", extra={**summary, **observability.embedded_metrics(metrics)})
    # The one place a processing outcome becomes an SQS outcome: a listed record is delivered
    # again; every other record is acknowledged (deleted). Every record may be listed at once
    # (database down): that is a valid answer, not an error.
    return {
        "batchItemFailures": [
            {"itemIdentifier": m.message_id} for m in messages if m.message_id in redeliver
        ]
    }
