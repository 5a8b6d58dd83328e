"""The run's metrics: the report's counters and the backlog gauges, as Powertools (EMF) metrics.

Kept apart from the steps: the entry point emits them once per run, after a run that finished and
after one that was aborted alike.
"""

from __future__ import annotations

from typing import Any

from webhook_inbox.maintenance.registry_check import RegistryHealth
from webhook_inbox.maintenance.report import SweepReport


def emit_registry_metrics(health: RegistryHealth, metrics: Any) -> None:
    """A failed read of the providers registry (the metric ingest's failed reads feed too) and
    the providers with no live secret (an emptied registry as one); nothing while it is healthy."""
    from aws_lambda_powertools.metrics import MetricUnit

    if health.read_failed:
        metrics.add_metric(name="ProvidersRefreshFailed", unit=MetricUnit.Count, value=1)
    if health.without_live_secret or health.empty:
        # An emptied registry counts as one provider refused: the same page (no delivery is
        # accepted), its cause named in the run's line (providers_registry_empty).
        count = len(health.without_live_secret) or 1
        metrics.add_metric(name="ProvidersWithoutLiveSecret", unit=MetricUnit.Count, value=count)
    if health.secrets_unavailable:
        # What ingest's 503 for the same secret counts: the secret-unavailable alarm, once.
        unreadable = health.secrets_unavailable
        metrics.add_metric(name="SecretUnavailable", unit=MetricUnit.Count, value=unreadable)


def emit_metrics(report: SweepReport, metrics: Any) -> None:
    """Add the run's non-zero counters and gauges to ``metrics`` (Powertools Metrics) and flush
    the dimensioned ones. Dimensions stay bounded: only ``status`` beside ``service``.

    Zeros are left out: CloudWatch bills a custom metric for every hour it receives a value, so
    an idle stack publishing fourteen zeros a minute paid $4.20 a month for them. Every alarm on
    these metrics treats missing data as not breaching, and a graph shows a gap for zero.
    """
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    count, seconds, none = MetricUnit.Count, MetricUnit.Seconds, MetricUnit.NoUnit
    values: list[tuple[str, MetricUnit, float]] = [
        ("LeasesExpired", count, report.leases_expired),
        ("DeadLettered", count, report.leases_dead_lettered),
        # Rows sent to the queue, first sends and re-wakes alike (the log line tells them apart).
        ("Reenqueued", count, report.reenqueued + report.rewoken),
        ("EnqueueFailed", count, report.enqueue_failed),
        ("HeldReleased", count, report.held_released),
        ("ProbesSent", count, report.probes_sent),
        ("OutboxPublished", count, report.outbox_published),
        ("OutboxFailed", count, report.outbox_retried),
        ("OutboxDead", count, report.outbox_dead),
    ]
    measured = report.backlog  # None: no time was left to measure; alarms see it as missing
    if measured is not None:
        values += [
            ("OldestUnprocessedAgeSeconds", seconds, measured.oldest_unprocessed_age_seconds),
            ("OldestOutboxAgeSeconds", seconds, measured.oldest_outbox_age_seconds),
            ("DeadLetteredEvents", count, measured.dead_lettered_events),
            ("HeldEvents", count, measured.event_counts["held"]),
            ("OldestHeldAgeSeconds", seconds, measured.oldest_held_age_seconds),
            ("OpenCircuits", count, measured.open_circuits),
            # Hours, the unit of the PauseAlarmHours threshold (CloudWatch has no hour unit).
            ("OldestPauseAgeHours", none, measured.oldest_pause_age_seconds / 3600),
        ]
    for name, unit, value in values:
        if value:
            metrics.add_metric(name=name, unit=unit, value=value)
    # One EMF document per status: a dimension applies to every metric in its document.
    for status, value in measured.event_counts.items() if measured is not None else ():
        if value:
            with single_metric(
                name="BacklogCount",
                unit=count,
                value=value,
                namespace=metrics.namespace,
                default_dimensions={"status": status},
            ):
                pass
