"""functions/sweeper/app.py invoked in-process with the schedule event: metrics, one log line."""

from __future__ import annotations

import json
import logging
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.maintenance.conftest import Aws, RecordingEvents, claim
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox.errors import ConfigurationError, StoreError, StoreUnavailable
from webhook_inbox.maintenance.publishers import EventBridgePublisher
from webhook_inbox.store import db, inbox, inbox_upkeep, outbox

SECRET_IN_PAYLOAD = "pm_card_4242_do_not_log"


@pytest.fixture
def sweeper_app(database_url: str, aws: Aws, events: RecordingEvents) -> ModuleType:
    app = load_function("sweeper")
    app.publisher = lambda: EventBridgePublisher(events, event_bus_name="default")
    return app


@pytest.fixture
def output(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[pytest.CaptureFixture[str], pytest.LogCaptureFixture]:
    """stdout (EMF metrics) and the log records (the Powertools handler's stream is fixed at
    its first use in the process, so records are formatted again from caplog)."""
    return capsys, caplog


def _emf_metrics(stdout: str) -> list[tuple[str, float, dict[str, str]]]:
    """(metric name, value, dimensions) for every metric in the EMF documents printed."""
    found = []
    for line in stdout.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            dimension_names = {name for group in directive["Dimensions"] for name in group}
            dimensions = {name: document[name] for name in dimension_names}
            for metric in directive["Metrics"]:
                raw = document[metric["Name"]]
                values = raw if isinstance(raw, list) else [raw]  # Powertools writes arrays
                found += [(metric["Name"], float(value), dimensions) for value in values]
    return found


def _formatted_logs(app: ModuleType, caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The JSON lines the function's Powertools logger writes, for records it emitted."""
    formatter = app.logger.registered_formatter
    return [
        json.loads(formatter.format(record))
        for record in caplog.records
        if record.name == app.logger.name
    ]


def _emf_everywhere(stdout: str, app: ModuleType, caplog: pytest.LogCaptureFixture) -> str:
    """The EMF documents of a run: the summary line (the run's counters ride in it) and the
    per-status BacklogCount documents Powertools prints."""
    return stdout + "\n" + "\n".join(json.dumps(line) for line in _formatted_logs(app, caplog))


def _arrange_backlog(conn: psycopg.Connection[Any]) -> None:
    claim(conn, "evt_new", payload={"card": SECRET_IN_PAYLOAD})  # received, never enqueued
    dead = claim(conn, "evt_dead")
    inbox.lease_events(conn, [dead], owner="w", lease_seconds=60)
    inbox.mark_dead_letter(conn, dead, owner="w", error_kind="permanent", error="bad")
    conn.execute("UPDATE webhook_events SET received_at = now() - interval '120 seconds'")
    outbox.add_message(
        conn,
        topic="customer.welcome",
        deduplication_key="stripe:evt_x:customer.welcome",
        payload={"card": SECRET_IN_PAYLOAD},
        source_event_id=None,
    )


def test_schedule_invocation_sweeps_emits_bounded_metrics_and_one_summary_line(
    conn: psycopg.Connection[Any],
    aws: Aws,
    events: RecordingEvents,
    sweeper_app: ModuleType,
    output: tuple[pytest.CaptureFixture[str], pytest.LogCaptureFixture],
) -> None:
    capsys, caplog = output
    _arrange_backlog(conn)
    caplog.set_level(logging.INFO)

    result = sweeper_app.handler(load_event("schedule"), FakeLambdaContext())

    assert result["reenqueued"] == 1
    assert result["outbox_published"] == 1
    assert len(aws.queued_ids()) == 1
    assert events.published_keys() == ["stripe:evt_x:customer.welcome"]

    stdout = capsys.readouterr().out
    metrics = _emf_metrics(_emf_everywhere(stdout, sweeper_app, caplog))
    by_name: dict[str, list[tuple[float, dict[str, str]]]] = {}
    for name, value, dimensions in metrics:
        by_name.setdefault(name, []).append((value, dimensions))
    assert by_name["Reenqueued"] == [(1.0, {"service": "webhook-inbox"})]
    assert by_name["OutboxPublished"][0][0] == 1.0
    # Zeros are not published (each metric bills for every hour it receives a value).
    assert "LeasesExpired" not in by_name
    assert "OutboxDead" not in by_name
    assert by_name["DeadLetteredEvents"][0][0] == 1.0
    assert 119 <= by_name["OldestUnprocessedAgeSeconds"][0][0] <= 180
    assert "OldestOutboxAgeSeconds" not in by_name  # 0: its only message was published
    backlog = {dims["status"]: value for value, dims in by_name["BacklogCount"]}
    # Measured after the run's work: the received row was enqueued but is still unprocessed.
    assert backlog == {"received": 1.0, "dead_letter": 1.0}  # the empty statuses: no document
    # Bounded dimensions only: no ids, keys or event types.
    assert {name for _, _, dims in metrics for name in dims} <= {"service", "status"}

    logs = _formatted_logs(sweeper_app, caplog)
    summaries = [line for line in logs if line["message"] == "sweep finished"]
    assert len(summaries) == 1
    summary = summaries[0]["sweep"]
    assert summary["reenqueued"] == 1
    assert summary["backlog"]["event_counts"]["dead_letter"] == 1
    assert summary["stopped_early_at"] is None
    assert SECRET_IN_PAYLOAD not in stdout
    assert all(SECRET_IN_PAYLOAD not in json.dumps(line) for line in logs)


def test_outbox_dead_metric_is_emitted_when_a_message_exhausts_its_attempts(  # noqa: PLR0917
    conn: psycopg.Connection[Any],
    aws: Aws,
    sweeper_app: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("OUTBOX_MAX_ATTEMPTS", "1")
    refusing = EventBridgePublisher(
        RecordingEvents(fail=lambda entry: True), event_bus_name="default"
    )
    sweeper_app.publisher = lambda: refusing
    outbox.add_message(conn, topic="t", deduplication_key="k", payload={}, source_event_id=None)

    sweeper_app.handler(load_event("schedule"), FakeLambdaContext())

    output = _emf_everywhere(capsys.readouterr().out, sweeper_app, caplog)
    metrics = {name: value for name, value, _ in _emf_metrics(output)}
    assert metrics["OutboxDead"] == 1.0
    assert conn.execute("SELECT status FROM outbox_messages").fetchone() == ("dead",)


def test_a_database_outage_ends_the_run_as_store_unavailable_after_reporting_what_was_done(
    conn: psycopg.Connection[Any],
    sweeper_app: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    claim(conn, "evt_1")
    # A lease that expired, so the step that completes before the outage has a count to report.
    expired = claim(conn, "evt_2")
    conn.execute(
        "UPDATE webhook_events SET status = 'processing', attempts = 1, lease_owner = 'w',"
        " lease_expires_at = now() - interval '1 minute' WHERE id = %s",
        (expired,),
    )
    caplog.set_level(logging.INFO)

    def outage(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("OperationalError")

    with monkeypatch.context() as patch:
        patch.setattr(inbox_upkeep, "claim_due_for_enqueue", outage)
        # Not the invocation's failure (sweeper-errors is for the sweeper's own): the run is
        # counted as StoreUnavailable, the metric ingest's 503s feed, so one alarm pages.
        result = sweeper_app.handler(load_event("schedule"), FakeLambdaContext())
    assert result == {"unavailable": "store"}

    [aborted] = [
        line for line in _formatted_logs(sweeper_app, caplog) if line["message"] == "sweep aborted"
    ]
    assert aborted["sweep"]["completed_steps"] == [
        "partitions_ahead",
        "expire_leases",
        "paused_events",
    ]
    assert (aborted["reason"], aborted["detail"]) == ("store", "OperationalError")
    assert "LeasesExpired" in aborted  # the counters so far, as EMF in the same line
    emitted = {name: value for name, value, _ in _emf_metrics(json.dumps(aborted))}
    assert emitted["StoreUnavailable"] == 1.0
    assert "LeasesExpired" in emitted
    # The connection is dropped, so the next invocation opens a fresh one...
    assert db._connection is None
    # ...and, the database back, simply does the work.
    result = sweeper_app.handler(load_event("schedule"), FakeLambdaContext())
    assert result["reenqueued"] == 2  # evt_1, and evt_2 now failed and due


def test_a_database_error_that_is_no_outage_fails_the_invocation(
    conn: psycopg.Connection[Any],
    sweeper_app: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A statement the database refuses (a schema the code does not match) is the sweeper's
    own failure: sweeper-errors pages for it, not store-unavailable."""
    caplog.set_level(logging.INFO)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("UndefinedColumn")

    with monkeypatch.context() as patch:
        patch.setattr(inbox_upkeep, "claim_due_for_enqueue", refused)
        with pytest.raises(StoreError):
            sweeper_app.handler(load_event("schedule"), FakeLambdaContext())
    [aborted] = [
        line for line in _formatted_logs(sweeper_app, caplog) if line["message"] == "sweep aborted"
    ]
    assert "StoreUnavailable" not in aborted
    assert db._connection is None


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_missing_queue_url_is_a_configuration_error(
    database_url: str, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROCESSING_QUEUE_URL")
    app = load_function("sweeper")
    with pytest.raises(ConfigurationError, match="PROCESSING_QUEUE_URL"):
        app.handler(load_event("schedule"), FakeLambdaContext())
