"""Logs and metrics: payloads and secrets never reach them; outcomes and reasons always do."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.integration.ingest.conftest import IngestHarness, providers_config, row_count

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
    from webhook_inbox import db

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
    deliveries = [r for r in records if r.get("message") == "delivery"]
    assert len(deliveries) == len(statuses)
    reasons = {r.get("reason") for r in deliveries if r["outcome"] == "rejected"}
    assert reasons == {"signature", "stale", "unknown_provider", "schema"}
    accepted = [r for r in deliveries if r["outcome"] == "accepted"]
    assert all(r["event_id"].startswith("evt_") and r["provider"] == "acme" for r in accepted)
    assert all("duration_ms" in r for r in deliveries)
    # Metrics: each delivery line is also its EMF document (no second line): the metric's
    # dimension values are the line's own fields, bounded ones only, the reason on Rejected.
    assert '"_aws"' not in out.out, "no EMF document apart from its delivery line"
    names = set()
    for document in deliveries:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        (metric,) = directive["Metrics"]
        names.add(metric["Name"])
        (dimensions,) = directive["Dimensions"]
        assert set(dimensions) <= {"provider", "reason", "service"}
        assert all(isinstance(document[name], str) for name in dimensions)
        assert ("reason" in dimensions) == (metric["Name"] == "Rejected")
        assert document.get("provider") in {None, "acme", "acme-timestamped"}
        assert document[metric["Name"]] == [1.0]
    assert {"Accepted", "Duplicate", "Rejected", "StoreUnavailable"} <= names
