"""The environment: the only module that reads it (``tests/unit/base/test_config.py``).

A function's settings are a frozen dataclass whose fields name their variables
(:func:`setting`); every one of them lives in :mod:`webhook_inbox.settings`. :func:`current`
builds one from the environment on first use and keeps it for the execution environment;
:func:`reset` forgets them all (tests, and the tools between two commands). :func:`load` builds
one from a given mapping, uncached. The template test compares the fields with template.yaml.
Values are parsed and checked the same way everywhere: positive numbers, whole numbers, flags,
strings (unset is ``""``, never None).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

from webhook_inbox.errors import ConfigurationError

_VARIABLE = "environment_variable"
_FLAG_TRUE = frozenset({"1", "true", "yes", "on"})
SettingsT = TypeVar("SettingsT")

# The process environment, read-only (the tools copy it for a child process's environment).
ENVIRONMENT: Mapping[str, str] = os.environ
# The settings objects built so far in this execution environment, by class (:func:`current`).
_current: dict[type, Any] = {}


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


def setting(variable: str, default: Any) -> Any:
    """A settings field read from ``variable``, parsed by its default's type: ``int`` (positive,
    whole), ``float`` (positive), ``bool`` (1/true/yes/on) or ``str`` (stripped; an optional
    string defaults to ``""``, the one way a setting says "unset")."""
    if default is None:
        raise TypeError(f"{variable}: an unset setting is '', not None")
    return dataclasses.field(default=default, metadata={_VARIABLE: variable})


def variables(settings_class: type) -> dict[str, str]:
    """Field name -> environment variable, for every :func:`setting` field of a settings class."""
    return {
        f.name: f.metadata[_VARIABLE]
        for f in dataclasses.fields(settings_class)
        if _VARIABLE in f.metadata
    }


def _parsed(variable: str, default: Any, source: Mapping[str, str]) -> Any:
    if isinstance(default, bool):
        raw = source.get(variable, "").strip().lower()
        return raw in _FLAG_TRUE if raw else default
    if isinstance(default, int):
        return env_int(variable, default, source)
    if isinstance(default, float):
        return env_number(variable, default, source)
    return source.get(variable, "").strip() or default


def load(settings_class: type[SettingsT], environ: Mapping[str, str] | None = None) -> SettingsT:
    """A settings object with every :func:`setting` field read from ``environ`` (default: the
    process environment); other fields keep their defaults."""
    source = ENVIRONMENT if environ is None else environ
    fields = {f.name: f for f in dataclasses.fields(settings_class)}  # type: ignore[arg-type]
    values = {
        name: _parsed(variable, fields[name].default, source)
        for name, variable in variables(settings_class).items()
    }
    return settings_class(**values)


def current(settings_class: type[SettingsT]) -> SettingsT:
    """The execution environment's settings of this class: read from the process environment on
    first use, then the same object until :func:`reset`."""
    found = _current.get(settings_class)
    if found is None:
        found = _current[settings_class] = load(settings_class)
    return found


def use(settings: object) -> None:
    """Make ``settings`` what :func:`current` returns for its class (tests, tools that were given
    their configuration explicitly), until :func:`reset`."""
    _current[type(settings)] = settings


def reset() -> None:
    """Forget every settings object, so the next :func:`current` reads the environment again: the
    one reset, called by the tests' conftest before every test, by the test helpers that start a
    fresh execution environment, and by the tools before every command."""
    _current.clear()
