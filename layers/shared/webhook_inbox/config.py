"""The environment: the only runtime module that reads it (``tests/unit/test_config.py``).

Settings are parsed and checked the same way everywhere: positive numbers, whole numbers,
strings with a default. Other modules take ``ENVIRONMENT`` (or a mapping of their own, in
tests) and read it through these helpers, never ``os.environ`` directly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from webhook_inbox.errors import ConfigurationError

# The process environment, as a read-only view for the modules that build their settings.
ENVIRONMENT: Mapping[str, str] = os.environ


def env(name: str, default: str = "", environ: Mapping[str, str] | None = None) -> str:
    """A string from ``environ`` (default: the process environment); unset → ``default``."""
    return (ENVIRONMENT if environ is None else environ).get(name, default)


def env_number(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A positive number from ``environ`` (default: the process's); unset or blank → default."""
    raw = (ENVIRONMENT if environ is None else environ).get(name, "").strip()
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
    """A positive whole number from ``environ`` (default: the process's); unset → default."""
    raw = (ENVIRONMENT if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be a whole number, got {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive, got {raw!r}")
    return value
