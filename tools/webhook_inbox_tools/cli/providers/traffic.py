"""What ``providers list`` shows of each provider's traffic over the last 24 hours.

Two sources:

- the inbox database (``--database-url``, ``DATABASE_URL``, or the running dev's): events first
  received in the window (accepted), repeat deliveries (duplicates) and the latest delivery;
- a deployed stack's CloudWatch metrics (namespace WebhookInbox, ``Accepted``, ``Duplicate`` and
  ``RejectedByProvider`` per ``provider`` and ``service`` = the stack), one GetMetricData call.

Rejected deliveries are never stored, so only the metrics count them: with a stack, the metrics
give the rejections, and the accepted and duplicate counts too unless the database answers (it
is exact, the metrics are to five minutes). Without a stack (dev) rejections show ``-``. When a
source cannot be read its counts are ``None`` (shown as ``-``) and a note says why, once.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from webhook_inbox.store import db
from webhook_inbox.store.queries import SqlFile
from webhook_inbox_tools.cli.providers.target import Target
from webhook_inbox_tools.dev import refusals

WINDOW = timedelta(hours=24)
NAMESPACE = "WebhookInbox"
# Five-minute buckets: fine enough to place the last delivery, 288 points per metric a day.
PERIOD_S = 300
REJECTED_NOTE = "rejected deliveries are counted only by a deployed stack's metrics (--stack)"
_METRICS = ("Accepted", "Duplicate", "RejectedByProvider")


@dataclass
class Traffic:
    accepted: int | None = None
    duplicates: int | None = None
    rejected: int | None = None
    last_delivery_at: datetime | None = None


@dataclass
class TrafficReport:
    source: str
    by_provider: dict[str, Traffic] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    has_rejections: bool = False  # the database is a dev's, which records what it refused

    def of(self, name: str) -> Traffic:
        return self.by_provider.get(name, Traffic())


_statement = SqlFile("providers", package="webhook_inbox_tools").statement


def _database_url(args: argparse.Namespace, target: Target) -> str | None:
    return (
        getattr(args, "database_url", None)
        or db.settings().url
        or target.dev_env.get("DATABASE_URL")
    )


def traffic(args: argparse.Namespace, target: Target, names: list[str]) -> TrafficReport:
    url = _database_url(args, target)
    stored = _from_database(url, names) if url else None
    if not target.stack_name:
        if stored is None:
            return TrafficReport("none", notes=["no traffic counts: no database and no stack"])
        if not stored.has_rejections:
            stored.notes.insert(0, REJECTED_NOTE)
        return stored
    measured = _from_metrics(target, names)
    if stored is None or not stored.by_provider:
        # No database, or one out of reach: the stack's metrics count everything.
        measured.notes = [*(stored.notes if stored else []), *measured.notes]
        return measured
    # The database's counts are exact; the rejections exist only as metrics.
    for name, counts in stored.by_provider.items():
        counts.rejected = measured.of(name).rejected
    stored.notes += measured.notes
    return stored


def rejected_from_metrics(target: Target, names: list[str], window: timedelta) -> TrafficReport:
    """The stack's RejectedByProvider (and Accepted, Duplicate) per provider over ``window``:
    what the console's health page shows of a deployed stack's refusals."""
    return _from_metrics(target, names, window)


def _from_database(url: str, names: list[str]) -> TrafficReport:
    from webhook_inbox.errors import StoreError
    from webhook_inbox.store import db

    report = TrafficReport("database")
    since = datetime.now(UTC) - WINDOW
    try:
        with db.connect(url, application_name="webhook-inbox-cli") as conn:
            rows = conn.execute(
                _statement("provider_traffic"),
                {"since": since, "providers": names},
            ).fetchall()
            # A dev's database also holds what it refused: the rejections, exact.
            refused = refusals.counts_by_provider(conn, since=since, providers=names)
    except StoreError as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return TrafficReport("database", notes=[f"no traffic counts: the database: {first_line}"])
    for provider, accepted, duplicates, last in rows:
        report.by_provider[provider] = Traffic(int(accepted), int(duplicates), None, last)
    for name in names:
        report.by_provider.setdefault(name, Traffic(0, 0, None, None))
        if refused is not None:
            report.by_provider[name].rejected = refused.get(name, 0)
    report.has_rejections = refused is not None
    return report


def _metric_query(index: int, metric: str, provider: str, stack: str) -> dict[str, Any]:
    dimensions = [{"Name": "provider", "Value": provider}, {"Name": "service", "Value": stack}]
    return {
        "Id": f"m{index}",
        "Label": f"{metric}/{provider}",
        "MetricStat": {
            "Metric": {"Namespace": NAMESPACE, "MetricName": metric, "Dimensions": dimensions},
            "Period": PERIOD_S,
            "Stat": "Sum",
        },
    }


def _from_metrics(target: Target, names: list[str], window: timedelta = WINDOW) -> TrafficReport:
    from botocore.exceptions import BotoCoreError, ClientError

    stack = target.stack_name or ""
    report = TrafficReport("metrics")
    queries = [
        _metric_query(i, metric, name, stack)
        for i, (metric, name) in enumerate((metric, name) for name in names for metric in _METRICS)
    ]
    if not queries:
        return report
    # Aligned to the period, as CloudWatch answers fastest, and past now so the current bucket
    # (this minute's deliveries) is in.
    now = datetime.now(UTC).timestamp()
    end = datetime.fromtimestamp((now // PERIOD_S + 1) * PERIOD_S, UTC)
    results: list[dict[str, Any]] = []
    try:
        request: dict[str, Any] = {
            "MetricDataQueries": queries,
            "StartTime": end - window,
            "EndTime": end,
        }
        while True:  # one call unless CloudWatch pages the answer
            reply = target.cloudwatch.get_metric_data(**request)
            results += reply["MetricDataResults"]
            if not reply.get("NextToken"):
                break
            request["NextToken"] = reply["NextToken"]
    except (BotoCoreError, ClientError) as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code") or type(exc).__name__
        return TrafficReport("metrics", notes=[f"no traffic counts: CloudWatch: {code}"])
    for name in names:
        report.by_provider[name] = Traffic(0, 0, 0, None)
    for result in results:
        metric, name = result["Label"].split("/", 1)
        counts = report.by_provider[name]
        total = int(sum(result.get("Values", [])))
        if metric == "RejectedByProvider":
            counts.rejected = (counts.rejected or 0) + total
            continue  # a rejected delivery is no delivery of the provider's
        if metric == "Accepted":
            counts.accepted = (counts.accepted or 0) + total
        else:
            counts.duplicates = (counts.duplicates or 0) + total
        busy = [t for t, v in zip(result["Timestamps"], result["Values"], strict=True) if v > 0]
        if busy:
            latest = max(busy)
            if counts.last_delivery_at is None or latest > counts.last_delivery_at:
                counts.last_delivery_at = latest
    return report
