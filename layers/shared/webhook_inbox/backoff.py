"""Exponential backoff with full jitter, shared by event retries and outbox retries."""

from __future__ import annotations

import random


def backoff_delay(
    attempt: int,
    *,
    base_seconds: float,
    cap_seconds: float,
    rng: random.Random | None = None,
) -> float:
    """Delay before retry ``attempt`` (1-based): uniform in [d/2, d], d = min(cap, base·2^(n-1)).

    Half the window is fixed so a retry never comes back immediately; the other half spreads a
    burst of failures so they do not return in lockstep.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    ceiling = min(cap_seconds, base_seconds * 2 ** min(attempt - 1, 62))
    draw: float = (rng or random).random()
    return float(ceiling / 2 + draw * ceiling / 2)
