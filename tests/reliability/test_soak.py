"""The chaos soak (see tests/reliability/soak.py). CI runs the 2,000-event size on every push;
``pytest tests/reliability --soak-events 20000`` (or ``SOAK_EVENTS=20000 pytest -m slow
tests/reliability``) runs the large one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.reliability.conftest import requested_soak_events
from tests.reliability.infra import DedicatedPostgres
from tests.reliability.soak import SoakReport, SoakSettings, run_soak

CI_EVENTS = 2000
LARGE_EVENTS = 20000


def _assert_nothing_lost_or_applied_twice(report: SoakReport) -> None:
    settings = report.settings
    assert report.violations == [], report.violations[:20]
    assert report.lost == 0
    assert report.double_applied == 0
    assert report.leaks == [], "a secret or payload text reached a log line"
    assert report.gave_up == 0, "every event must be acknowledged within the retry schedule"
    assert report.acked == settings.events
    assert report.duplicates >= 0.30 * settings.events
    assert not [s for s in report.statuses if 400 <= s < 500], report.statuses
    # The faults really happened.
    for kind in ("sigkill", "pg_terminate_backend", "db_restart", "sqs_send", "publish"):
        assert report.faults[kind] > 0, f"no {kind} fault was injected"
    assert report.kills_mid_batch > 0, "no worker was killed while holding leases"


def _run(settings: SoakSettings, pg: DedicatedPostgres, tmp_path: Path) -> SoakReport:
    report = run_soak(settings, pg, tmp_path)
    line = report.summary()
    print(line)  # shown with -s; also on the terminal below
    target = os.environ.get("SOAK_REPORT")
    if target:
        Path(target).write_text(json.dumps({"summary": line, "faults": report.faults}) + "\n")
    return report


def test_chaos_soak(
    dedicated_pg: DedicatedPostgres, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run(SoakSettings(events=CI_EVENTS), dedicated_pg, tmp_path)
    with capsys.disabled():
        print("\n" + report.summary())
    _assert_nothing_lost_or_applied_twice(report)


@pytest.mark.slow
def test_chaos_soak_large(
    request: pytest.FixtureRequest,
    dedicated_pg: DedicatedPostgres,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    events = requested_soak_events(request.config) or LARGE_EVENTS
    settings = SoakSettings(
        events=events,
        db_restarts=max(1, events // 4000),
        drain_timeout_s=120 + events / 50,
    )
    report = _run(settings, dedicated_pg, tmp_path)
    with capsys.disabled():
        print("\n" + report.summary())
    _assert_nothing_lost_or_applied_twice(report)
