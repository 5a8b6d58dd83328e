"""How every function logs: lean JSON lines, and where metrics come from.

CloudWatch Logs bills every byte a function writes (standard class, $0.50 per GB in us-east-1),
which made logs the largest cost per webhook after the per-request charges. So:

- :func:`lean_logger` is Powertools' Logger without the keys that repeat what CloudWatch already
  knows (code location, the X-Ray id of untraced functions, the service) and with an RFC 3339
  UTC timestamp: under the template's JSON log format Lambda reads ``level`` and ``timestamp``
  from each line (a line without a valid timestamp would be re-levelled INFO and re-stamped).
  An INFO line carries no ``level``: Lambda reads a line without one as INFO ("If the level
  value field is invalid or missing, Lambda will assign the log output the level INFO",
  Lambda developer guide, "Log-level filtering"), and INFO is what most lines are (ingest's
  one per delivery, the processor's per batch), so the key is paid only where it says more.
- Ingest's metrics are counted from its one line per delivery by metric filters on its log
  group (template.yaml): the line carries the fields they match and their dimensions, nothing
  else. The processor and sweeper gather many values per invocation, so their summary line
  carries them as EMF (:func:`embedded_metrics`: ``_aws`` plus the values; an EMF document may
  carry any other property, so one line is both the log entry and the metrics). Either way no
  PutMetricData call and no second line.

Only the entry points (``functions/*/app.py``) write these lines; library functions return
outcomes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.constants import MAX_METRICS

# 2026-11-30T10:00:00.123Z: RFC 3339, so Lambda's JSON log format keeps the line's level.
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%FZ"


def lean_logger() -> Logger:
    """The process's Powertools Logger (one per service name: later calls share the first one's
    handler and formatter), without ``location``, ``xray_trace_id`` and ``service``: the log
    group already names the function and its stack, and a line with metrics gets ``service``
    back from :func:`embedded_metrics` or, in ingest, as a field of its own: the dimension the
    alarms filter on."""
    logger = Logger(
        utc=True,
        datefmt=TIMESTAMP_FORMAT,
        location=None,
        xray_trace_id=None,
        json_serializer=_serialize,
        json_deserializer=_message_as_json,
    )
    logger.remove_keys(["service"])
    return logger


# What json.loads accepts from a text that starts with a letter: nothing else.
_JSON_WORDS = frozenset({"true", "false", "null", "NaN", "Infinity"})


def _message_as_json(message: Any) -> Any:
    """Powertools' reading of a str message as JSON (a JSON message is logged as what it
    holds), without the exception: it tries ``json.loads`` on every message, and ours are
    words ("batch", "accepted"), each failing with an exception raised and caught: a tenth of
    the processor's summary line. Text that starts with a letter is JSON only if it is one of
    JSON's words; other such text is returned as it is, which is what the failed parse kept."""
    if isinstance(message, str) and message[:1].isalpha() and message.rstrip() not in _JSON_WORDS:
        return message
    return json.loads(message)


def _serialize(line: dict[str, Any]) -> str:
    """A line as compact JSON (Powertools' own settings), ``level`` left out where it is INFO."""
    if line.get("level") == "INFO":
        line = {key: value for key, value in line.items() if key != "level"}
    return json.dumps(line, default=str, separators=(",", ":"), ensure_ascii=False)


def embedded_metrics(metrics: Metrics) -> dict[str, Any]:
    """The EMF members for the metrics gathered in ``metrics``, to merge into one log line's
    fields; the set is emptied. Nothing when no metric was added or metrics are disabled
    (POWERTOOLS_METRICS_DISABLED, as for Powertools' own flush)."""
    if not metrics.metric_set or is_metrics_disabled():
        metrics.clear_metrics()
        return {}
    document = dict(metrics.serialize_metric_set())
    metrics.clear_metrics()
    return document


def add_metric_values(
    metrics: Metrics, *, name: str, unit: MetricUnit, values: Sequence[float]
) -> None:
    """``metrics.add_metric`` for each of ``values`` (the processor's ProcessingLatency, one
    per event), for little more than the price of one call.

    Each ``add_metric`` validates the name, value, unit and resolution, and formats the metric
    with all its values so far into a debug message, logged or not: ten calls were 4 % of the
    processor's client CPU per batch of 10. Here the first value goes through ``add_metric``
    (its checks, the metric's entry) and the others are appended to that entry as it would
    append them; when a value would make ``add_metric`` publish the set (Powertools'
    ``MAX_METRICS`` values), ``add_metric`` takes it, so the output is the same.
    """
    for value in values:
        entry = metrics.metric_set.get(name)
        if entry is None or len(entry["Value"]) >= MAX_METRICS - 1:
            metrics.add_metric(name=name, unit=unit, value=value)
        else:
            entry["Value"].append(float(value))
