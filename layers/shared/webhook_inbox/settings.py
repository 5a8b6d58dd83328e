"""Numeric settings from the environment, parsed and checked the same way everywhere."""

from __future__ import annotations

import os
from collections.abc import Mapping

from webhook_inbox.errors import ConfigurationError


def env_number(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A positive number from ``environ`` (default ``os.environ``); unset or blank → default."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a number, got {raw!r}") from None
    if not value > 0:  # also refuses NaN
        raise ConfigurationError(f"{name} must be positive, got {raw!r}")
    return value


def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    """A positive whole number from ``environ`` (default ``os.environ``); unset → default."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {raw!r}")
    return value
