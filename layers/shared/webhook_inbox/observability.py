"""How every function logs: lean JSON lines that carry their own CloudWatch metrics.

CloudWatch Logs bills every byte a function writes (standard class, $0.50 per GB in us-east-1),
which made logs the largest cost per webhook after the per-request charges (issue 18). So:

- :func:`lean_logger` is Powertools' Logger without the keys that repeat what CloudWatch already
  knows (code location, the X-Ray id of untraced functions, the service) and with an RFC 3339
  UTC timestamp: under the template's JSON log format Lambda reads ``level`` and ``timestamp``
  from each line (a line without a valid timestamp would be re-levelled INFO and re-stamped).
- :func:`embedded_metrics` turns the metrics gathered for one line into that line's EMF members
  (``_aws`` plus the metric values). An EMF document may carry any other property, so one line
  is both the log entry and the metric: the log fields that name a dimension (``service``,
  ``provider``, ``reason``) are its dimension values. CloudWatch extracts the metric from the
  log event; no PutMetricData call, no second line.

Only the entry points (``functions/*/app.py``) write these lines; library functions return
outcomes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
    AmazonCloudWatchEMFProvider,
)

# 2026-11-30T10:00:00.123Z: RFC 3339, so Lambda's JSON log format keeps the line's level.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%FZ"

MetricSet = Metrics | AmazonCloudWatchEMFProvider


def lean_logger() -> Logger:
    """The process's Powertools Logger (one per service name: later calls share the first one's
    handler and formatter), without ``location``, ``xray_trace_id`` and ``service``: the log
    group already names the function and its stack, and a line with metrics gets ``service``
    back from :func:`embedded_metrics`, as the dimension the alarms filter on."""
    logger = Logger(utc=True, datefmt=TIMESTAMP_FORMAT, location=None, xray_trace_id=None)
    logger.remove_keys(["service"])
    return logger


def metric_set() -> AmazonCloudWatchEMFProvider:
    """A fresh, empty set for one line's metrics (namespace and ``service`` from the
    POWERTOOLS_* settings, as Powertools' own Metrics read them)."""
    return AmazonCloudWatchEMFProvider()


def count(metrics: MetricSet, names: Iterable[str], **dimensions: str | None) -> None:
    """Add 1 to each metric in ``names``, with the given dimensions (None: not a dimension)."""
    for name in names:
        metrics.add_metric(name=name, unit="Count", value=1)
    for name, value in dimensions.items():
        if value is not None:
            metrics.add_dimension(name=name, value=value)


def embedded_metrics(metrics: MetricSet) -> dict[str, Any]:
    """The EMF members for the metrics gathered in ``metrics``, to merge into one log line's
    fields; the set is emptied. Nothing when no metric was added or metrics are disabled
    (POWERTOOLS_METRICS_DISABLED, as for Powertools' own flush)."""
    if not metrics.metric_set or is_metrics_disabled():
        metrics.clear_metrics()
        return {}
    document = dict(metrics.serialize_metric_set())
    metrics.clear_metrics()
    return document
