"""Ingest Lambda: ``POST /webhooks/{provider}`` (and the ``GET`` of senders' challenges) from API
Gateway REST (v1), HTTP API (v2) or a Function URL. Verify, validate, claim, enqueue — all in
``webhook_inbox.ingest.pipeline``; this module only sets the AWS budget and writes the delivery's
log line (metric filters in template.yaml count it), and the line for a failed re-read of the
providers registry.

Kept lean for cold starts: no Tracer, Parameters or pydantic; boto3 is imported on the first
delivery that needs it (the providers registry's first read, a new event to enqueue), not at
import time.
"""

from __future__ import annotations

import resource
from typing import Any

from webhook_inbox import aws, config, deadlines, observability
from webhook_inbox.ingest import pipeline, provider_source
from webhook_inbox.settings import IngestSettings

logger = observability.lean_logger()

aws.use(aws.INGEST)  # every AWS call on this path fits the function's 8 s


# Built on first use and kept for the execution environment (not at import, so tests can set
# the environment first): the settings by webhook_inbox.config, the clients by webhook_inbox.aws.
def settings() -> IngestSettings:
    return config.current(IngestSettings)


def sqs_client() -> Any:
    return aws.client("sqs")


def reset_clients() -> None:
    """Forget the settings, clients and providers, as a new execution environment would (tests
    start a fresh moto mock per case)."""
    config.reset()
    provider_source.reset()
    aws.reset()


# A delivery this slow gets its duration in its line (a cold start, a slow database): a third of
# Slack's 3 s. Faster ones are in the function's Duration metric.
SLOW_DELIVERY_MS = 1000.0


def observe(outcome: pipeline.Outcome, context: Any) -> None:
    """One line per delivery, its message the outcome (accepted, duplicate, rejected,
    handshake, unavailable, error); the template's metric filters count these lines.

    The fields an operator traces a delivery by (provider, event id) and the ones the metric
    filters use: ``service`` (the stack, the dimension every alarm filters on), ``provider``,
    ``reason`` and ``enqueue_failed``. The duration only for a slow or failed delivery, the
    request id and the row id only where there is more to read (a 5xx or a failed enqueue: the
    runtime's own error lines carry the request id, and the row is the one the sweeper will
    wake); the HTTP status follows from outcome and reason.

    An accepted or duplicate delivery's line leaves the row id out (24 B of its 174 at a
    partitioned inbox's 14 digits, $0.012 per million webhooks): the row is found from the event
    id (``webhook-inbox events show``), and the processor's lines other than its batch summary
    carry both ids.
    """
    troubled = outcome.status >= 500 or outcome.enqueue_failed
    fields: dict[str, Any] = {
        "service": logger.service,
        "provider": outcome.provider,
        "event_id": outcome.event_id,
        "delivery_id": outcome.delivery_id,
        "row_id": outcome.row_id if troubled else None,
        # A batch (SendGrid, HubSpot): how many events it carried, how many were new; event_id
        # (and row_id) name its first.
        "events": outcome.events if outcome.events > 1 else None,
        "new_events": outcome.new_events if outcome.events > 1 else None,
        "reason": outcome.reason,
        "detail": outcome.detail,
    }
    if outcome.enqueue_failed:
        fields["enqueue_failed"] = True
    if outcome.activity_mark_failed:
        fields["activity_mark_failed"] = outcome.activity_mark_failed
    if troubled or outcome.duration_ms >= SLOW_DELIVERY_MS:
        fields["duration_ms"] = round(outcome.duration_ms, 1)
    if troubled:
        fields["request_id"] = getattr(context, "aws_request_id", None)
    fields = {k: v for k, v in fields.items() if v is not None}
    if outcome.providers_refresh_failed:
        # Once per failed read (failed reads back off: about eight in the first minute of an
        # outage, then two a minute): the ProvidersRefreshFailed metric filter counts it. The
        # reason is a code, never the document.
        logger.error(
            "providers_refresh_failed",
            extra={"service": logger.service, "reason": outcome.providers_refresh_failed},
        )
    if troubled:
        logger.error(outcome.outcome, extra=fields)
    elif outcome.status >= 400:
        logger.warning(outcome.outcome, extra=fields)
    else:
        logger.info(outcome.outcome, extra=fields)


# Lambda's own report of an invocation (its timeout, its memory) is not kept at ingest's
# IngestSystemLogLevel, WARN: it would be two thirds of ingest's log bytes. Ingest says it
# itself: a line this long before the timeout stops an invocation still running, and one line
# per execution environment whose peak memory passes this share of its size (a body too large to
# parse is refused before it is parsed: bodies.body_limit).
LAST_WORD_MARGIN_S = 0.5
MEMORY_HIGH_SHARE = 0.8
_said_once: set[str] = set()  # the lines said once per execution environment


def _timing_out(request_id: str, seconds: float) -> None:
    logger.error(
        "timing out",
        extra={"service": logger.service, "request_id": request_id, "after_s": round(seconds, 1)},
    )


def _check_memory(context: Any) -> None:
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    memory_mb = getattr(context, "memory_limit_in_mb", 0)
    if "memory high" in _said_once or not memory_mb:
        return
    if peak_mb >= MEMORY_HIGH_SHARE * int(memory_mb):
        _said_once.add("memory high")
        logger.warning(
            "memory high",
            extra={
                "service": logger.service,
                "request_id": context.aws_request_id,
                "peak_mb": round(peak_mb),
                "memory_mb": int(memory_mb),
            },
        )


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    seconds = context.get_remaining_time_in_millis() / 1000 - LAST_WORD_MARGIN_S
    request_id = context.aws_request_id
    with deadlines.last_word(seconds, lambda: _timing_out(request_id, seconds)):
        outcome = pipeline.handle(event, sqs_client=sqs_client, settings=settings)
        observe(outcome, context)
    _check_memory(context)
    return outcome.response()
