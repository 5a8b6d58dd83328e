"""Operator Lambda entry point, deployed twice from this code: OperatorReadFunction
(``OPERATOR_LEVEL=read``) and OperatorActFunction (``act``), each behind a Function URL with
``AuthType: AWS_IAM``. ``webhook-inbox … --stack STACK`` signs its command with the caller's AWS
credentials and POSTs it here, so every operator command works from any machine with credentials
and no network path to the database.

Thin on purpose: settings, the connection and the queue once per execution environment; the
request, its level, the caller AWS authenticated and the errors' statuses in
``webhook_inbox.operations.function_url``; one log line per request (who, what, the outcome,
never a payload: for a payload read at the act level, this line is its audit).
"""

from __future__ import annotations

import time
from typing import Any

from psycopg import Connection

from webhook_inbox import aws, config, deadlines, idle_ledger, observability
from webhook_inbox.operations import commands, function_url
from webhook_inbox.settings import OperatorSettings
from webhook_inbox.store import db

aws.use(aws.OPERATOR)
logger = observability.lean_logger()
# The answer's deadline on our side of the network: time left to say so before Lambda's.
DEADLINE_MARGIN_S = 3.0


def settings() -> OperatorSettings:
    return config.current(OperatorSettings)


# The longest an act-level invocation writes after its activity mark: its 60 s timeout, rounded.
OPERATOR_HORIZON_S = 65.0


def connection() -> Connection[Any]:
    configured = settings()
    if configured.level == "act":
        # A replay, a resume or an outbox retry makes work due: announce it before writing, so
        # the sweeper looks at the database afterwards (docs/design.md, "Idle means idle").
        failed = idle_ledger.mark_activity(
            configured.idle_ledger_bucket, horizon_s=OPERATOR_HORIZON_S
        )
        if failed:
            logger.warning("activity mark failed", extra={"reason": failed})
    conn = db.get_connection(application_name=f"webhook-inbox-operator-{settings().level}")
    conn.autocommit = True  # each action is its own explicit transaction
    return conn


def queue() -> commands.Queue | None:
    """Where a replay's wake-ups go (the act level; the read level never sends)."""
    configured = settings()
    if configured.level != "act" or not configured.queue_url:
        return None
    return commands.Queue(configured.queue_url, lambda: aws.client("sqs"))


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    started = time.monotonic()
    configured, where = settings(), queue()
    budget = context.get_remaining_time_in_millis() / 1000 - DEADLINE_MARGIN_S
    with deadlines.deadline(budget, db.current_connection):
        handled = function_url.handle(
            event, level=configured.level, connection=connection, queue=where
        )
    if handled.status == 503:
        db.discard_connection()  # a broken or cut connection: the next request opens another
    logger.info(
        "operator",
        extra={
            **handled.log,
            "status": handled.status,
            "duration_ms": round((time.monotonic() - started) * 1000),
            "request_id": context.aws_request_id,
        },
    )
    return handled.response
