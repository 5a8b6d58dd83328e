"""Sweeper configuration from the environment, and the time budget's arithmetic."""

from __future__ import annotations

import pytest

from webhook_inbox.config import load
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.maintenance.context import TimeBudget
from webhook_inbox.settings import SweeperSettings

QUEUE = {"PROCESSING_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q"}


def test_defaults() -> None:
    config = load(SweeperSettings, QUEUE)
    assert (config.max_attempts, config.outbox_max_attempts) == (8, 10)
    assert (config.payload_retention_days, config.key_retention_days) == (30, 90)
    assert (config.retry_base_seconds, config.retry_max_seconds) == (5, 3600)


def test_values_from_the_environment() -> None:
    config = load(
        SweeperSettings,
        {
            **QUEUE,
            "OUTBOX_MAX_ATTEMPTS": "3",
            "PAYLOAD_RETENTION_DAYS": "7",
            "KEY_RETENTION_DAYS": "45",
        },
    )
    assert (config.outbox_max_attempts, config.payload_retention_days) == (3, 7)
    assert config.key_retention_days == 45


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({}, "PROCESSING_QUEUE_URL"),
        ({**QUEUE, "KEY_RETENTION_DAYS": "2", "PAYLOAD_RETENTION_DAYS": "1"}, "at least 3"),
        ({**QUEUE, "OUTBOX_MAX_ATTEMPTS": "ten"}, "number"),
        ({**QUEUE, "PAYLOAD_RETENTION_DAYS": "0"}, "positive"),
    ],
)
def test_invalid_configuration_is_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load(SweeperSettings, environ)


def test_time_budget_keeps_the_margin_and_accounts_for_the_next_batch() -> None:
    remaining = [25_000]
    budget = TimeBudget(lambda: remaining[0], margin_ms=10_000)
    assert budget.allows()
    assert budget.allows(15_000)
    assert not budget.allows(15_001)
    remaining[0] = 9_999
    assert not budget.allows()
    assert budget.allows(reserve_ms=5_000)
