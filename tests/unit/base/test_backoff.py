import random

import pytest

from webhook_inbox.backoff import backoff_delay


def test_delay_grows_exponentially_within_jitter_bounds() -> None:
    rng = random.Random(7)
    for attempt, ceiling in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0)]:
        for _ in range(200):
            delay = backoff_delay(attempt, base_seconds=2, cap_seconds=900, rng=rng)
            assert ceiling / 2 <= delay <= ceiling


def test_delay_is_capped_even_for_huge_attempt_numbers() -> None:
    delay = backoff_delay(10_000, base_seconds=2, cap_seconds=900, rng=random.Random(1))
    assert 450 <= delay <= 900


def test_jitter_spreads_retries() -> None:
    rng = random.Random(3)
    delays = {
        round(backoff_delay(5, base_seconds=1, cap_seconds=60, rng=rng), 3) for _ in range(50)
    }
    assert len(delays) > 40


def test_attempt_is_one_based() -> None:
    with pytest.raises(ValueError, match="1-based"):
        backoff_delay(0, base_seconds=1, cap_seconds=1)
