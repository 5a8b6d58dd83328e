"""Ingest Lambda: ``POST /webhooks/{provider}`` from API Gateway REST (v1), HTTP API (v2) or a
Function URL. Verify, validate, claim, enqueue — all in ``webhook_inbox.ingest``; this module only
sets the AWS budget, logs and metrics.

Kept lean for cold starts: no Tracer, Parameters or pydantic; boto3 is imported on the first
delivery that needs it (a new event to enqueue), not at import time.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from webhook_inbox import aws, ingest

logger = Logger()

aws.use(aws.INGEST)  # every AWS call on this path fits the function's 8 s

# Per execution environment, built on the first delivery (not at import, so tests can set the
# environment first); reset_clients() forgets it with the clients.
_settings: ingest.IngestSettings | None = None


def settings() -> ingest.IngestSettings:
    global _settings  # noqa: PLW0603 - reused across warm invocations
    if _settings is None:
        _settings = ingest.IngestSettings.from_env()
    return _settings


def sqs_client() -> Any:
    """The process's SQS client, built on the first send (:mod:`webhook_inbox.aws`)."""
    return aws.client("sqs")


def reset_clients() -> None:
    """Forget the cached clients and settings (tests start a fresh moto mock per case)."""
    global _settings  # noqa: PLW0603
    _settings = None
    aws.reset()


def _emit(name: str, outcome: ingest.Outcome) -> None:
    # single_metric flushes its own EMF document: no state shared between concurrent requests,
    # and each metric carries only its own bounded dimensions.
    with single_metric(name=name, unit=MetricUnit.Count, value=1) as metric:
        if outcome.provider:
            metric.add_dimension(name="provider", value=outcome.provider)
        if name == "Rejected" and outcome.reason:
            metric.add_dimension(name="reason", value=outcome.reason)


def observe(outcome: ingest.Outcome, context: Any) -> None:
    fields = {
        "outcome": outcome.outcome,
        "status": outcome.status,
        "provider": outcome.provider,
        "event_id": outcome.event_id,
        "event_type": outcome.event_type,
        "delivery_id": outcome.delivery_id,
        "row_id": outcome.row_id,
        "reason": outcome.reason,
        "detail": outcome.detail,
        "duration_ms": outcome.duration_ms,
        "request_id": getattr(context, "aws_request_id", None),
    }
    fields = {k: v for k, v in fields.items() if v is not None}
    if outcome.status >= 500 or outcome.enqueue_failed:
        logger.error("delivery", extra=fields)
    elif outcome.status >= 400:
        logger.warning("delivery", extra=fields)
    else:
        logger.info("delivery", extra=fields)
    for name in filter(None, [outcome.metric, *outcome.extra_metrics]):
        _emit(name, outcome)


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    outcome = ingest.handle(event, sqs_client=sqs_client, settings=settings)
    observe(outcome, context)
    return outcome.response()
