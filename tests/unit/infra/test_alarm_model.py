"""The model tests/integration/infra/test_on_call.py judges the alarms with (tests/alarm_model.py):
Lambda's JSON log-level filter as AWS documents it, alarm evaluation, Logs Insights filters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.alarm_model import (
    CompositeAlarm,
    Datapoint,
    filter_matches,
    lambda_level,
    lambda_metric,
    platform_report,
    query_fields,
    reaches_cloudwatch,
    runtime_error_line,
    template_alarms,
)
from tests.infra_support import filter_pattern_matches


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ({"level": "INFO"}, "INFO"),
        ({"level": "ERROR"}, "ERROR"),
        ({"level": "WARNING"}, "INFO"),  # Powertools' spelling is not one of Lambda's six
        ({"level": "CRITICAL"}, "INFO"),
        ({"level": "warn"}, "WARN"),
        ({"message": "no level at all"}, "INFO"),
        (runtime_error_line("r", "KeyError"), "ERROR"),  # the runtime writes log_level
    ],
)
def test_lambda_reads_a_lines_level_as_documented(line: dict[str, str], level: str) -> None:
    assert lambda_level(line) == level


def test_powertools_drops_what_is_below_its_level_before_lambda_sees_it() -> None:
    info = {"level": "INFO", "message": "accepted"}
    levels = {"application_level": "DEBUG", "system_level": "INFO"}
    assert reaches_cloudwatch(info, log_level="INFO", **levels)
    assert not reaches_cloudwatch(info, log_level="WARNING", **levels)
    warning = {"level": "WARNING", "message": "rejected"}
    # Written by Powertools at WARNING, read by Lambda as INFO: an application level of WARN
    # drops it although it is a warning.
    assert not reaches_cloudwatch(
        warning, log_level="WARNING", application_level="WARN", system_level="INFO"
    )


def test_the_report_line_is_dropped_at_system_level_warn_only() -> None:
    report = platform_report("r", "timeout")
    for system_level, kept in (("DEBUG", True), ("INFO", True), ("WARN", False)):
        assert (
            reaches_cloudwatch(
                report, log_level="ERROR", application_level="FATAL", system_level=system_level
            )
            is kept
        )


def test_alarms_evaluate_periods_datapoints_and_missing_data() -> None:
    alarms = template_alarms()
    errors = [lambda_metric(12, "Errors", "SweeperFunction")]
    assert not alarms["sweeper-errors"].fires(errors, 30)  # one of five minutes
    errors.append(lambda_metric(14, "Errors", "SweeperFunction"))
    assert alarms["sweeper-errors"].fires(errors, 30)  # two of five
    # No invocation at all is missing data, which this alarm treats as breaching.
    assert alarms["sweeper-not-running"].fires([], 10)
    ran = [lambda_metric(m, "Invocations", "SweeperFunction") for m in range(10)]
    assert not alarms["sweeper-not-running"].fires(ran, 10)
    # Metrics Insights: a matching dimension subset; another stack's metric is not ours.
    ours = Datapoint(3, "WebhookInbox", "DeadLettered", (("service", "webhook-inbox"),), 1.0)
    theirs = Datapoint(3, "WebhookInbox", "DeadLettered", (("service", "other"),), 1.0)
    assert alarms["events-dead-lettered"].fires([ours], 10)
    assert not alarms["events-dead-lettered"].fires([theirs], 10)


def test_logs_insights_filters_and_fields() -> None:
    line = {"message": "batch", "redelivered": 2, "record": {"status": "timeout"}}
    assert filter_matches('message = "batch" and redelivered > 0', line)
    assert not filter_matches('message = "batch" and redelivered > 2', line)
    assert filter_matches('record.status != "success"', line)
    assert filter_matches('message = "nope" or ispresent(record.status)', line)
    assert not filter_matches("ispresent(errorType)", line)
    query = 'filter message = "x" | stats max(@timestamp) as last_run, count() by provider'
    assert query_fields(query) == {"message", "@timestamp", "provider"}


def test_the_maintenance_hour_reads_store_unavailable_as_zero() -> None:
    """IF(DAY(x) == 7 && HOUR(x) == 4, 0, x) at the defaults (sun, 04): the same failure pages
    on a Wednesday and not from Sunday 04:00 to 04:59 (UTC), and pages again after it."""
    alarm = template_alarms()["store-unavailable"]
    assert alarm.quiet == (7, 4)
    failing = [
        Datapoint(m, "WebhookInbox", "StoreUnavailable", (("service", "webhook-inbox"),), 1.0)
        for m in range(5, 25)
    ]
    assert alarm.fires(failing, 30)
    assert not alarm.fires(failing, 30, datetime(2026, 12, 6, 3, 55, tzinfo=UTC))
    assert alarm.fires(failing, 30, datetime(2026, 12, 6, 4, 50, tzinfo=UTC))  # past 05:00
    moved = template_alarms(MaintenanceWindowDay="tue", MaintenanceWindowHour="22")
    assert moved["store-unavailable"].quiet == (2, 22)


def test_a_throttled_sweeper_counts_as_scheduled() -> None:
    alarm = template_alarms()["sweeper-not-running"]
    assert alarm.fires([], 10)
    throttled = [lambda_metric(m, "Throttles", "SweeperFunction") for m in range(10)]
    assert not alarm.fires(throttled, 10)


def test_the_no_delivery_alarm_exists_only_when_asked_for() -> None:
    assert "no-delivery" not in template_alarms()
    alarm = template_alarms(NoDeliveryAlarmHours="6")["no-delivery"]
    assert (alarm.period_min, alarm.evaluation_periods, alarm.missing_breaches) == (60, 6, True)


def test_filter_patterns_with_alternatives() -> None:
    pattern = '{ $.message = "accepted" || $.message = "duplicate" && $.provider = "*" }'
    assert filter_pattern_matches(pattern, {"message": "accepted"})
    assert filter_pattern_matches(pattern, {"message": "duplicate", "provider": "stripe"})
    assert not filter_pattern_matches(pattern, {"message": "duplicate"})
    with pytest.raises(ValueError, match="parentheses"):
        filter_pattern_matches('{ ($.a = "x") }', {})


def _refused(minute: int, provider: str, value: float) -> Datapoint:
    dims = (("provider", provider), ("service", "webhook-inbox"))
    return Datapoint(minute, "WebhookInbox", "DeliveryRefused", dims, value)


def test_a_provider_whose_every_delivery_of_the_hour_was_refused_pages_once() -> None:
    """MIN(DeliveryRefused) GROUP BY provider over an hour: one refused delivery and nothing
    verified is enough, one verified delivery of the same provider is not, and another
    provider's verified deliveries do not hide it (each provider is its own contributor)."""
    alarm = template_alarms()["deliveries-refused"]
    assert isinstance(alarm, CompositeAlarm)
    assert [c.name for c in alarm.children] == [
        "signature-rejections",
        "provider-deliveries-all-refused",
    ]
    quiet = [_refused(10, "stripe", 1.0)]
    assert alarm.fires(quiet, 120)
    assert not alarm.fires(quiet, 59)  # judged once the hour is complete
    assert not alarm.fires([*quiet, _refused(40, "stripe", 0.0)], 120)
    assert alarm.fires([*quiet, _refused(40, "github", 0.0)], 120)
    assert not alarm.fires([], 120)  # no delivery at all is not a breach


def test_either_half_of_the_composite_pages_and_it_stays_one_alarm() -> None:
    alarm = template_alarms()["deliveries-refused"]
    assert isinstance(alarm, CompositeAlarm)
    rate, hour = alarm.children
    busy = [
        Datapoint(
            m,
            "WebhookInbox",
            "Rejected",
            (("reason", "signature"), ("service", "webhook-inbox")),
            30.0,
        )
        for m in range(0, 120)
    ]
    assert any(rate.states(busy, 120))
    assert not any(hour.states(busy, 120))
    assert alarm.fires(busy, 120)
    states = rate.states(busy, 120)
    assert states.index(True) == 14  # three complete 5-minute periods: the end of minute 14
