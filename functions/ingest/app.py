"""Ingest Lambda: ``POST /webhooks/{provider}`` from API Gateway REST (v1), HTTP API (v2) or a
Function URL. Verify, validate, claim, enqueue — all in ``webhook_inbox.ingest``; this module only
sets the AWS budget, logs and metrics.

Kept lean for cold starts: no Tracer, Parameters or pydantic; boto3 is imported on the first
delivery that needs it (a new event to enqueue), not at import time.
"""

from __future__ import annotations

from typing import Any

from webhook_inbox import aws, ingest, observability

logger = observability.lean_logger()

aws.use(aws.INGEST)  # every AWS call on this path fits the function's 8 s


def sqs_client() -> Any:
    """The process's SQS client, built on the first send (:mod:`webhook_inbox.aws`)."""
    return aws.client("sqs")


def reset_clients() -> None:
    """Forget the cached clients (tests start a fresh moto mock per case)."""
    aws.reset()


def observe(outcome: ingest.Outcome, context: Any) -> None:
    """One line per delivery: the log entry and, in the same JSON document, its EMF metrics.

    The fields an operator traces a delivery by (provider, event id, row id, outcome) and the
    ones an alarm groups by (``provider``, ``reason``: also the metrics' dimension values). The
    request id only where there is more to read (a 5xx or a failed enqueue: the runtime's own
    error lines carry it); the HTTP status follows from outcome and reason.
    """
    fields: dict[str, Any] = {
        "outcome": outcome.outcome,
        "provider": outcome.provider,
        "event_id": outcome.event_id,
        "delivery_id": outcome.delivery_id,
        "row_id": outcome.row_id,
        "reason": outcome.reason,
        "detail": outcome.detail,
        "duration_ms": round(outcome.duration_ms, 1),
    }
    troubled = outcome.status >= 500 or outcome.enqueue_failed
    if troubled:
        fields["request_id"] = getattr(context, "aws_request_id", None)
    fields = {k: v for k, v in fields.items() if v is not None}
    metrics = observability.metric_set()
    observability.count(
        metrics,
        filter(None, [outcome.metric, *outcome.extra_metrics]),
        provider=outcome.provider,
        # Only Rejected is split by reason (its alarm watches reason = 'signature').
        reason=outcome.reason if outcome.metric == "Rejected" else None,
    )
    fields.update(observability.embedded_metrics(metrics))
    if troubled:
        logger.error("delivery", extra=fields)
    elif outcome.status >= 400:
        logger.warning("delivery", extra=fields)
    else:
        logger.info("delivery", extra=fields)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    outcome = ingest.handle(event, sqs_client=sqs_client)
    observe(outcome, context)
    return outcome.response()
