"""Fixtures and switches of the reliability suite.

* ``pytest -m soak tests/reliability`` runs the CI-sized chaos soaks (marked ``soak``; .ci/run
  runs them after the README's command, which leaves them out to stay quick).
* ``--soak-events N`` (with ``pytest tests/reliability``) or ``SOAK_EVENTS=N`` runs the large
  soak (marked ``slow``) with N events; ``-m slow`` runs it with its default size. Without
  either, the large soak is deselected.
* ``HYPOTHESIS_PROFILE=ci`` (default) or ``long`` sizes the fuzzing runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.reliability.infra import DedicatedPostgres

_FUZZ_COMMON = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    "derandomize": False,
}
settings.register_profile("ci", max_examples=150, **_FUZZ_COMMON)  # type: ignore[arg-type]
settings.register_profile("long", max_examples=5000, **_FUZZ_COMMON)  # type: ignore[arg-type]
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-events",
        type=int,
        default=None,
        help="run the large (slow) chaos soak with this many events",
    )


def requested_soak_events(config: pytest.Config) -> int | None:
    from_option = config.getoption("--soak-events", default=None)
    if from_option:
        return int(from_option)
    from_env = os.environ.get("SOAK_EVENTS", "").strip()
    return int(from_env) if from_env else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) the soaks unless asked for: the large ones (``slow``: ``-m slow`` or
    ``--soak-events``), and the CI-sized ones (``soak``: ``-m soak``, which .ci/run runs after
    the README's command, so CI still runs them)."""
    expression = config.option.markexpr or ""
    wanted = {
        "slow": requested_soak_events(config) is not None or "slow" in expression,
        "soak": "soak" in expression,
    }
    left_out = [
        item
        for item in items
        if "reliability" in item.nodeid
        and any(item.get_closest_marker(name) and not asked for name, asked in wanted.items())
    ]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [i for i in items if i not in left_out]


@pytest.fixture(scope="module")
def dedicated_pg() -> Iterator[DedicatedPostgres]:
    """A PostgreSQL of this module's own, which its tests may stop, restart and kill."""
    server = DedicatedPostgres()
    try:
        yield server
    finally:
        server.close()
