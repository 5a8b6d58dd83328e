"""Logs and metrics: payloads and secrets never reach them; outcomes and reasons always do."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.infra_support import metric_filters
from tests.integration.ingest.conftest import SHAPES, IngestHarness, providers_config, row_count
from tests.support import FakeLambdaContext
from webhook_inbox import deadlines

MARKER = "PAYLOAD-MARKER-7f3a9c"


@pytest.fixture
def captured_logs(harness: IngestHarness) -> Iterator[io.StringIO]:
    """Everything any logger emits, formatted as the function's Powertools formatter would."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(harness.app.logger.registered_formatter)
    handler.setLevel(logging.DEBUG)
    service_logger = harness.app.logger._logger
    targets = [logging.getLogger()]  # the root sees every library's records
    if not service_logger.propagate:
        targets.append(service_logger)
    saved = [(t, t.level) for t in targets]
    for target in targets:
        target.addHandler(handler)
        target.setLevel(logging.DEBUG)
    try:
        yield sink
    finally:
        for target, level in saved:
            target.removeHandler(handler)
            target.setLevel(level)


def test_no_payload_or_secret_reaches_logs_or_metrics(
    harness: IngestHarness,
    captured_logs: io.StringIO,
    capsys: pytest.CaptureFixture[str],
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secrets = [
        s["value"]
        for p in providers_config()["providers"].values()
        for s in p["secrets"]
        if "value" in s
    ]
    statuses = []
    for n in range(12):
        body = json.dumps({"id": f"evt_{n}", "type": "t", "card": f"{MARKER}-{n}"}).encode()
        headers = harness.sign("acme", body)
        statuses.append(harness.deliver("acme", body, headers).status)  # accepted
        statuses.append(harness.deliver("acme", body, headers).status)  # duplicate
        statuses.append(harness.deliver("acme", body + b" ", headers).status)  # bad signature
        statuses.append(harness.deliver("nobody", body, headers).status)  # unknown provider
        bad = json.dumps([MARKER, n]).encode()
        statuses.append(harness.deliver("acme", bad, harness.sign("acme", bad)).status)  # schema
        stale = json.dumps({"id": f"old_{n}", "type": "t", "card": MARKER}).encode()
        old = harness.sign("acme-timestamped", stale, timestamp=harness.now - 10_000)
        statuses.append(harness.deliver("acme-timestamped", stale, old).status)  # stale
    monkeypatch.setenv("DATABASE_URL", "postgresql://x@127.0.0.1:9/x")
    from webhook_inbox.store import db

    db.reset_for_tests()
    body = json.dumps({"id": "evt_down", "type": "t", "card": MARKER}).encode()
    statuses.append(harness.deliver("acme", body, harness.sign("acme", body)).status)  # 503
    assert set(statuses) == {202, 200, 401, 404, 400, 503}
    assert row_count(conn) == 12

    logs = captured_logs.getvalue()
    out = capsys.readouterr()
    everything = logs + out.out + out.err
    assert MARKER not in everything
    for secret in secrets:
        assert secret not in everything
    records = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    outcomes = {"accepted", "duplicate", "rejected", "unavailable"}
    deliveries = [r for r in records if r.get("message") in outcomes]
    assert len(deliveries) == len(statuses)
    reasons = {r.get("reason") for r in deliveries if r["message"] == "rejected"}
    assert reasons == {"signature", "stale", "unknown_provider", "schema"}
    accepted = [r for r in deliveries if r["message"] == "accepted"]
    assert all(r["event_id"].startswith("evt_") and r["provider"] == "acme" for r in accepted)
    # The row is found from the event id: an accepted line does not repeat its id.
    assert not any("row_id" in r for r in accepted)
    (down,) = [r for r in deliveries if r["message"] == "unavailable"]
    assert (down["reason"], "duration_ms" in down, "request_id" in down) == ("store", True, True)
    # No EMF here any more: the template's metric filters count these lines.
    assert '"_aws"' not in everything
    assert_metric_filters_count_each_line_once(deliveries)


# The counter each ingest outcome must increment, and nothing else.
EXPECTED_METRIC = {
    "accepted": "Accepted",
    "duplicate": "Duplicate",
    "rejected": "Rejected",
    "unavailable": "StoreUnavailable",
}


def assert_metric_filters_count_each_line_once(lines: list[dict[str, Any]]) -> None:
    """Runs the template's filter patterns over the lines as CloudWatch Logs would: each line
    gives exactly its outcome's metric (a configured provider's rejection also its
    RejectedByProvider), with every dimension present and bounded."""
    filters = [f for f in metric_filters(deployed_with={}) if f.log_group == "IngestLogGroup"]
    for line in lines:
        expected = [EXPECTED_METRIC[line["message"]]]
        if line["message"] == "rejected" and "provider" in line:
            expected.append("RejectedByProvider")
        # DeliveryRefused is a per-provider gauge of its own (1 refused, 0 verified), read by
        # the all-refused alarm: a verified delivery sets it to 0.
        refused = [f.value for f in filters if f.matches(line) and f.metric == "DeliveryRefused"]
        if line["message"] in {"accepted", "duplicate"}:
            assert refused == [0.0], line
        assert set(refused) <= {0.0, 1.0}, line
        matched = [f for f in filters if f.matches(line) and f.metric != "DeliveryRefused"]
        assert [f.metric for f in matched] == expected, line
        for metric_filter in matched:
            values = metric_filter.dimension_values(line)
            assert None not in values.values(), (line, values)  # every dimension found
            assert values["service"] == "webhook-inbox"
            assert values.get("provider", "acme") in {"acme", "acme-timestamped"}
            assert values.get("reason", "signature") in {
                "signature",
                "stale",
                "unknown_provider",
                "schema",
            }


def test_a_failed_enqueue_is_counted_beside_its_acceptance(
    harness: IngestHarness,
    captured_logs: io.StringIO,
    monkeypatch: pytest.MonkeyPatch,
    conn: psycopg.Connection[Any],
) -> None:
    from webhook_inbox import aws

    monkeypatch.setattr(aws, "send_wakeup", lambda *_: "EndpointConnectionError")
    body = json.dumps({"id": "evt_unsent", "type": "t"}).encode()
    assert harness.deliver("acme", body, harness.sign("acme", body)).status == 202
    (line,) = [
        json.loads(text) for text in captured_logs.getvalue().splitlines() if '"accepted"' in text
    ]
    assert line["enqueue_failed"] is True
    assert "request_id" in line
    # The row the sweeper will wake, named where the wake-up failed.
    (row_id,) = conn.execute(
        "SELECT id FROM webhook_events WHERE event_id = 'evt_unsent'"
    ).fetchone() or (None,)
    assert line["row_id"] == row_id
    filters = [f for f in metric_filters(deployed_with={}) if f.log_group == "IngestLogGroup"]
    # Counted (a value of 0, DeliveryRefused's for a verified delivery, counts nothing).
    counted = sorted(f.metric for f in filters if f.matches(line) and f.value)
    assert counted == ["Accepted", "EnqueueFailed"]


def _lines(sink: io.StringIO, message: str) -> list[dict[str, Any]]:
    found = []
    for line in sink.getvalue().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("message") == message:
            found.append(record)
    return found


def test_an_invocation_still_running_near_its_timeout_says_so_itself(
    harness: IngestHarness, captured_logs: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At IngestSystemLogLevel WARN, Lambda's report of a timeout is not kept: ingest's own line,
    written by the watchdog's thread while the delivery still runs, is the evidence."""
    stalled = threading.Event()

    def stall_until_said(*_: Any, **__: Any) -> Any:
        # The delivery outlives its deadline: it waits (bounded) for the line it should cause.
        for _ in range(200):
            if _lines(captured_logs, "timing out"):
                break
            stalled.wait(0.05)
        raise RuntimeError("stalled delivery ends")

    monkeypatch.setattr(harness.app.pipeline, "handle", stall_until_said)
    context = FakeLambdaContext(remaining_ms=600)  # the line is due 0.5 s before: at 0.1 s
    with pytest.raises(RuntimeError):
        harness.app.handler({}, context)
    [line] = _lines(captured_logs, "timing out")
    assert (line["level"], line["request_id"]) == ("ERROR", context.aws_request_id)


def test_a_delivery_that_ends_in_time_leaves_no_last_word_behind(
    harness: IngestHarness, captured_logs: io.StringIO
) -> None:
    body = b'{"id":"evt_in_time","type":"t"}'
    assert harness.deliver("acme", body, harness.sign("acme", body)).status == 202
    assert deadlines._watchdog._blocks == []  # its block is forgotten: nothing left to say
    assert _lines(captured_logs, "timing out") == []


def test_memory_past_eighty_percent_of_the_size_is_said_once_per_environment(
    harness: IngestHarness, captured_logs: io.StringIO
) -> None:
    harness.app._said_once.clear()
    for n in range(2):
        body = f'{{"id":"evt_mem_{n}","type":"t"}}'.encode()
        event = SHAPES["v2"]("acme", body, harness.sign("acme", body))
        harness.app.handler(event, FakeLambdaContext(memory_limit_in_mb=16))
    [line] = _lines(captured_logs, "memory high")
    assert (line["level"], line["memory_mb"]) == ("WARNING", 16)
    assert line["peak_mb"] >= 13
