"""observability.add_metric_values: the same metrics, and the same flushes, as one
``add_metric`` call per value (it only skips the per-call checks and debug formatting)."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from webhook_inbox import observability


def _documents(printed: str, metrics: Metrics) -> list[dict[str, object]]:
    """What was flushed (printed, at Powertools' 100-value limit) and what is still gathered,
    without the timestamps."""
    documents = [json.loads(line) for line in printed.splitlines() if line.strip()]
    if metrics.metric_set:
        documents.append(dict(metrics.serialize_metric_set()))
    metrics.clear_metrics()
    for document in documents:
        document.pop("_aws", None)
    return documents


@pytest.mark.parametrize("count", [0, 1, 10, 99, 100, 101, 250])
def test_the_same_as_one_add_metric_per_value(
    count: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Test")
    metrics = Metrics()
    metrics.clear_metrics()
    values = [float(v % 7) for v in range(count)]
    metrics.add_metric(name="Processed", unit=MetricUnit.Count, value=count)

    for value in values:
        metrics.add_metric(name="ProcessingLatency", unit=MetricUnit.Milliseconds, value=value)
    one_by_one = _documents(capsys.readouterr().out, metrics)

    metrics.add_metric(name="Processed", unit=MetricUnit.Count, value=count)
    observability.add_metric_values(
        metrics, name="ProcessingLatency", unit=MetricUnit.Milliseconds, values=values
    )
    together = _documents(capsys.readouterr().out, metrics)

    assert together == one_by_one
    # Every flush where one-by-one had it (a set emptied by the last flush leaves none behind).
    assert len(together) == count // 100 + (count % 100 != 0 or count == 0)
