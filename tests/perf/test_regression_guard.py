"""Regression guard: the deterministic figures of the ingest and processing benchmarks (bench/).

Only counts are asserted here (round trips and commits on the wire), because they are exact on any
machine. Speed is a ratio against a baseline measured in the same run and lives in bench/ only: a
throughput ratio asserted in the suite failed CI on a busy two-core machine (0.49x against a 0.56x
floor) without any code change.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import ingest_throughput, processing_throughput
from bench.common import ROOT
from webhook_inbox.ingest import providers

# Round trips per delivery: exactly one, new or duplicate (the claim stamps enqueued_at itself;
# only a failed SendMessage costs a second statement, to clear the stamp).
INGEST_DUPLICATE_ROUND_TRIPS = 1
INGEST_NEW_ROUND_TRIPS = 1

# Target 3 round trips per batch; today 12, exactly: the lease (1), one wait per event where the
# example handler reads its conditional INSERT's answer (10; the batch's BEGIN travels with the
# first, the unread outbox INSERTs with the next), and the pipeline's one closing sync (1), which
# carries the guard's check, the lease-checked batched mark and COMMIT. Fewer needs handlers that
# work on the whole batch: with handler(conn, event) each event's read is a wait of its own.
PROCESSING_ROUND_TRIPS = 12
PROCESSING_COMMITS = 2


@pytest.fixture
def ingest_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PROVIDERS_CONFIG_FILE", str(ROOT / "events" / "providers.local.json"))
    monkeypatch.delenv("PROVIDERS_CONFIG", raising=False)
    monkeypatch.delenv("MAX_BODY_BYTES", raising=False)
    monkeypatch.setenv("PROCESSING_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/1/guard")
    providers.reset_for_tests()
    yield
    providers.reset_for_tests()


def test_ingest_round_trips_per_delivery(database_url: str, ingest_config: None) -> None:
    counts = ingest_throughput.wire_counts(database_url)
    assert counts["handler, duplicate"][0] == INGEST_DUPLICATE_ROUND_TRIPS
    assert counts["handler, new"][0] == INGEST_NEW_ROUND_TRIPS
    assert counts["baseline, new"] == (1, 1)


def test_processing_round_trips_and_commits_per_batch(database_url: str) -> None:
    counts = processing_throughput.wire_counts(database_url, batches=1)
    processor = counts["processor"]
    assert processor.round_trips == PROCESSING_ROUND_TRIPS, processor.statements
    assert processor.commits == PROCESSING_COMMITS, processor.statements
