"""The chaos soak (see tests/reliability/soak.py). CI runs the 2,000-event size on every push,
and a 1,000-event run through the fault layer with short blackholes; ``pytest tests/reliability
--soak-events 20000`` (or ``SOAK_EVENTS=20000 pytest -m slow tests/reliability``) runs the large
ones (``-k fault_layer_large`` for the fault layer's alone, 5,000 events unless told otherwise, with
the issue's figures: two 10 s PostgreSQL blackholes and one 10 s SQS hang)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.conftest import requested_soak_events
from tests.reliability.infra import DedicatedPostgres
from tests.reliability.soak import SoakReport, SoakSettings, run_soak

CI_EVENTS = 2000
LARGE_EVENTS = 20000
# Six ingest workers behind the fault layer: each serves one request at a time (one Lambda
# environment), and while the database is blackholed a request takes up to 5 s to be answered
# 503; with two, the eight senders' requests queued behind each other past the provider's
# timeout, where API Gateway would have started more environments.
FAULT_LAYER_INGEST_WORKERS = 6
FAULT_LAYER_CI = SoakSettings(
    events=1000,
    ingest_workers=FAULT_LAYER_INGEST_WORKERS,
    fault_layer=True,
    pg_blackholes=2,
    pg_blackhole_s=3.0,
    sqs_hangs=1,
    sqs_hang_s=3.0,
    quiet_periods=1,
    idle_close_s=2.0,
    after_idle_window_s=2.0,
    plan_gap_s=2.0,
)
FAULT_LAYER_LARGE_EVENTS = 5000


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


def _assert_every_failure_was_a_503_and_idle_cost_nothing(report: SoakReport) -> None:
    settings = report.settings
    failing = {code for code in report.statuses if not 200 <= code < 300}
    assert failing <= {503}, report.statuses
    assert report.without_retry_after == 0, "a 503 without Retry-After"
    assert report.no_answer == 0, "a delivery went unanswered (timed out or refused)"
    assert report.faults["lambda_timeout"] == 0, "ingest answered after its function's timeout"
    assert report.idle_failures == 0, "a first request after idle failed"
    assert report.after_idle_answers > 0, "nothing was sent after the quiet periods"
    # The faults really happened.
    for kind, planned in (
        ("pg_blackhole", settings.pg_blackholes),
        ("sqs_hang", settings.sqs_hangs),
        ("quiet", settings.quiet_periods),
        ("db_restart", settings.db_restarts),
    ):
        assert report.faults[kind] == planned, f"{kind}: {report.faults[kind]} of {planned}"
    assert report.faults["pg_idle_closed"] > 0, "the proxy closed no idle connection"
    assert report.faults["stale_connection_retried"] > 0, "no stale connection was met"


def _run(
    settings: SoakSettings,
    pg: DedicatedPostgres,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> SoakReport:
    report = run_soak(settings, pg, tmp_path)
    line = report.summary()
    with capsys.disabled():
        print("\n" + line)  # on the terminal even without -s
    target = os.environ.get("SOAK_REPORT")
    if target:
        Path(target).write_text(json.dumps({"summary": line, "faults": report.faults}) + "\n")
    return report


def _large(request: pytest.FixtureRequest, default_events: int, **extra: Any) -> SoakSettings:
    events = requested_soak_events(request.config) or default_events
    return SoakSettings(
        events=events,
        db_restarts=max(1, events // 4000),
        drain_timeout_s=120 + events / 50,
        **extra,
    )


def test_chaos_soak(
    dedicated_pg: DedicatedPostgres, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run(SoakSettings(events=CI_EVENTS), dedicated_pg, tmp_path, capsys)
    _assert_nothing_lost_or_applied_twice(report)


@pytest.mark.slow
def test_chaos_soak_large(
    request: pytest.FixtureRequest,
    dedicated_pg: DedicatedPostgres,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _run(_large(request, LARGE_EVENTS), dedicated_pg, tmp_path, capsys)
    _assert_nothing_lost_or_applied_twice(report)


def test_chaos_soak_through_the_fault_layer(
    dedicated_pg: DedicatedPostgres, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _run(FAULT_LAYER_CI, dedicated_pg, tmp_path, capsys)
    _assert_nothing_lost_or_applied_twice(report)
    _assert_every_failure_was_a_503_and_idle_cost_nothing(report)


@pytest.mark.slow
def test_chaos_soak_through_the_fault_layer_large(
    request: pytest.FixtureRequest,
    dedicated_pg: DedicatedPostgres,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = _large(
        request,
        FAULT_LAYER_LARGE_EVENTS,
        ingest_workers=FAULT_LAYER_INGEST_WORKERS,
        fault_layer=True,
        pg_blackholes=2,
        pg_blackhole_s=10.0,
        sqs_hangs=1,
        sqs_hang_s=10.0,
        quiet_periods=2,
    )
    report = _run(settings, dedicated_pg, tmp_path, capsys)
    _assert_nothing_lost_or_applied_twice(report)
    _assert_every_failure_was_a_503_and_idle_cost_nothing(report)
