"""Sweeper Lambda entry point, run by an EventBridge schedule every minute.

Thin on purpose: build the run from the environment, run it, report it. The run and the order of
its steps live in ``webhook_inbox.maintenance.sweeper``; each step, its batching and the time
budget in ``webhook_inbox.maintenance``.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from webhook_inbox import aws, config, observability
from webhook_inbox.errors import SecretUnavailable, StoreError, StoreUnavailable
from webhook_inbox.maintenance import idle, publishers, registry_check
from webhook_inbox.maintenance.metrics import emit_metrics, emit_registry_metrics
from webhook_inbox.maintenance.publishers import Publisher
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.maintenance.sweeper import Sweep
from webhook_inbox.settings import SweeperSettings
from webhook_inbox.store import db

aws.use(aws.SWEEPER)
logger = observability.lean_logger()
metrics = Metrics()  # the run's counters, embedded in its one summary line
clock = time.time  # the idle decision's clock (tests move it on instead of sleeping)
# A provider secret's read (at most 14 s: two attempts of 2 s connect and 5 s read, aws.SWEEPER)
# starts only while this much of the invocation is left.
PROVIDER_SECRETS_UNTIL_MS = 45_000


# Built on first use and kept for the execution environment (not at import, so tests can set
# the environment first): the settings by webhook_inbox.config, the clients by webhook_inbox.aws.
def settings() -> SweeperSettings:
    return config.current(SweeperSettings)


def sqs_client() -> Any:
    return aws.client("sqs")


def publisher() -> Publisher:
    """The outbox's publisher: a wrapper around the cached client, per run."""
    return publishers.from_env()


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    # Settings and clients first: a configuration error fails the run before it connects.
    configured, sqs, outbox_publisher = settings(), sqs_client(), publisher()
    # The providers registry before the database, so an outage of either reports the other.
    registry = registry_check.check_registry(
        configured,
        time.time(),
        # Provider secrets are read only while the run keeps the time its sweep needs.
        keep_going=lambda: context.get_remaining_time_in_millis() > PROVIDER_SECRETS_UNTIL_MS,
    )
    emit_registry_metrics(registry, metrics)
    invocation = {"request_id": context.aws_request_id, **registry.as_log()}
    # The idle ledger before the database: a run with nothing due leaves it alone, so that an
    # idle database can pause (maintenance/idle.py). {"full": true} forces a database run.
    started_at = clock()
    verdict = idle.decide(configured, started_at, forced=event.get("full") is True)
    invocation["idle"] = verdict.reason
    if not verdict.connect:
        return _skipped(verdict, invocation)
    try:
        sweep = Sweep(
            db.get_connection(application_name="webhook-inbox-sweeper"),
            configured,
            sqs=sqs,
            publisher=outbox_publisher,
            remaining_ms=context.get_remaining_time_in_millis,
        )
    except SecretUnavailable as exc:
        return _secret_unavailable(exc, invocation)
    except StoreUnavailable as exc:
        return _store_unavailable("sweep not started: database unavailable", exc, invocation)
    except StoreError:
        db.discard_connection()
        logger.exception("sweep not started: database error", extra={**invocation, **_embedded()})
        raise
    # The one place where errors become outcomes: a database that cannot be reached or does not
    # answer aborts the run, reports what was done and counts StoreUnavailable, as ingest's 503
    # does; any other database error (a statement the schema refuses) fails the invocation
    # (the function's Errors). Either way the next run starts over: every step is safe to repeat.
    try:
        report = sweep.run()
    except SecretUnavailable as exc:
        emit_metrics(sweep.report, metrics)
        return _secret_unavailable(exc, {**invocation, "sweep": sweep.report.as_log()})
    except StoreUnavailable as exc:
        emit_metrics(sweep.report, metrics)
        return _store_unavailable(
            "sweep aborted", exc, {**invocation, "sweep": sweep.report.as_log()}
        )
    except StoreError:
        db.discard_connection()
        emit_metrics(sweep.report, metrics)
        logger.exception(
            "sweep aborted",
            extra={**invocation, "sweep": sweep.report.as_log(), **_embedded()},
        )
        raise
    emit_metrics(report, metrics)
    invocation["idle_record"] = idle.record_run(
        configured, verdict, started_at=started_at, report=report, due=sweep.next_due
    )
    # One line per run: the report, and its counters as EMF (the per-status BacklogCount
    # documents stay separate: a dimension value is one property of its document).
    logger.info("sweep finished", extra={**invocation, "sweep": report.as_log(), **_embedded()})
    return report.as_log()


def _skipped(verdict: idle.Verdict, invocation: dict[str, Any]) -> dict[str, Any]:
    """Nothing can be due: the run reports the quiet run's backlog, its ages advanced, so the
    alarms keep their data points, and writes the same line as a run that connected.

    The connection an earlier run left open in this environment is closed: Aurora counts an
    idle open connection as activity and would never pause while it stays."""
    db.discard_connection()
    report = SweepReport(backlog=verdict.backlog)
    emit_metrics(report, metrics)
    fields = {**invocation, "next_due": verdict.next_due, "sweep": report.as_log()}
    logger.info("sweep skipped: idle", extra={**fields, **_embedded()})
    return {"idle": True, **report.as_log()}


def _secret_unavailable(exc: SecretUnavailable, fields: dict[str, Any]) -> dict[str, Any]:
    """The run ends without failing the invocation: the next tick, a minute later, tries again.

    Ingest's line for the same cause (``unavailable``, reason ``secret``) and its
    ``SecretUnavailable`` count: the SecretUnavailable alarm pages, once, for all three
    functions (``SweeperErrors`` does not: this is no error of the sweeper's).
    """
    metrics.add_metric(name="SecretUnavailable", unit=MetricUnit.Count, value=1)
    detail = {"reason": "secret", "detail": str(exc)}
    logger.error("unavailable", extra={**fields, **detail, **_embedded()})
    return {"unavailable": "secret"}


def _store_unavailable(
    message: str, exc: StoreUnavailable, fields: dict[str, Any]
) -> dict[str, Any]:
    """The database failed the run: the run ends without failing the invocation.

    A database outage is one cause with one page, store-unavailable, whatever the traffic: the
    sweeper counts ``StoreUnavailable`` once a run as ingest does once per 503, so an idle stack
    pages too, and sweeper-errors stays the page for the sweeper's own failures (a bug, a
    timeout, a memory kill). The kept connection is dropped so the next run opens a new one.
    """
    db.discard_connection()
    metrics.add_metric(name="StoreUnavailable", unit=MetricUnit.Count, value=1)
    detail = {"reason": "store", "detail": str(exc)}
    logger.error(message, extra={**fields, **detail, **_embedded()})
    return {"unavailable": "store"}


def _embedded() -> dict[str, Any]:
    return observability.embedded_metrics(metrics)
