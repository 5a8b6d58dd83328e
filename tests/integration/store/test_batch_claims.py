"""One delivery, several events (SendGrid and HubSpot post batches): claim_events stores each
event once, in one statement, against a real PostgreSQL — including two deliveries of
overlapping batches racing each other, which must neither deadlock nor double-store."""

from __future__ import annotations

import hashlib
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from webhook_inbox.store import inbox

BODY_SHA = hashlib.sha256(b"[batch]").digest()


def _events(ids: list[str]) -> list[inbox.NewEvent]:
    return [inbox.NewEvent(event_id=i, event_type="delivered", payload={"sg": i}) for i in ids]


def _claim(conn: psycopg.Connection[Any], ids: list[str]) -> list[inbox.ClaimResult]:
    return inbox.claim_events(conn, provider="sendgrid", events=_events(ids), body_sha256=BODY_SHA)


def test_a_batch_stores_each_event_with_its_own_payload(conn: psycopg.Connection[Any]) -> None:
    claims = _claim(conn, ["b", "a", "c"])
    assert sorted(c.event_id for c in claims) == ["a", "b", "c"]
    assert all(c.is_new and c.status == "received" for c in claims)
    rows = conn.execute(
        "SELECT event_id, payload FROM webhook_events WHERE provider = 'sendgrid' ORDER BY 1"
    ).fetchall()
    assert rows == [("a", {"sg": "a"}), ("b", {"sg": "b"}), ("c", {"sg": "c"})]


def test_a_partly_known_batch_stores_only_the_new_events(conn: psycopg.Connection[Any]) -> None:
    _claim(conn, ["a", "b"])
    again = {c.event_id: c for c in _claim(conn, ["b", "c", "a", "d"])}
    assert {k for k, c in again.items() if c.is_new} == {"c", "d"}
    assert again["a"].delivery_count == 2
    assert again["b"].delivery_count == 2
    assert conn.execute("SELECT count(*) FROM webhook_events").fetchone() == (4,)


def test_a_key_repeated_inside_one_batch_is_stored_once_and_keeps_its_first_copy(
    conn: psycopg.Connection[Any],
) -> None:
    events = [
        inbox.NewEvent("dup", "delivered", {"copy": 1}),
        inbox.NewEvent("other", "open", {"copy": 2}),
        inbox.NewEvent("dup", "delivered", {"copy": 3}),
    ]
    claims = inbox.claim_events(conn, provider="sendgrid", events=events, body_sha256=BODY_SHA)
    assert sorted(c.event_id for c in claims) == ["dup", "other"]
    stored = conn.execute("SELECT payload FROM webhook_events WHERE event_id = 'dup'").fetchone()
    assert stored == ({"copy": 1},)


def test_overlapping_batches_racing_store_each_event_once_without_deadlock(
    database_url: str,
) -> None:
    # Twenty deliveries of overlapping batches, each shuffled differently, released together.
    # Without the key order in the statement, two of them lock shared rows in opposite orders
    # and PostgreSQL aborts one with a deadlock (a 503 for that delivery).
    keys = [f"sg_{n:03d}" for n in range(60)]
    rng = random.Random(7)
    batches = []
    for n in range(20):
        batch = keys[n : n + 40]
        rng.shuffle(batch)
        batches.append(batch)
    barrier = threading.Barrier(len(batches))

    def deliver(batch: list[str]) -> list[inbox.ClaimResult]:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait(timeout=30)
            return _claim(own, batch)

    with ThreadPoolExecutor(max_workers=len(batches)) as pool:
        results = list(pool.map(deliver, batches))

    new = [c.event_id for claims in results for c in claims if c.is_new]
    assert sorted(new) == sorted(set(new))  # no key was new twice
    assert set(new) == set(keys[:59])  # every key any batch carried
    with psycopg.connect(database_url) as check:
        counts = check.execute(
            "SELECT count(*), sum(delivery_count) FROM webhook_events"
        ).fetchone()
    assert counts == (59, sum(len(b) for b in batches))


def test_a_batch_with_a_row_a_processor_holds_is_answered_and_its_new_events_stored(
    database_url: str,
) -> None:
    # A processor's batch holds "held" locked until it commits; the redelivered batch that
    # carries it and a new event must neither wait that out (a 503) nor lose the new event.
    with psycopg.connect(database_url, autocommit=True) as setup:
        _claim(setup, ["held"])
    with (
        psycopg.connect(database_url) as processor,
        psycopg.connect(database_url, autocommit=True) as ingest,
    ):
        processor.execute("SELECT 1 FROM webhook_events WHERE event_id = 'held' FOR UPDATE")
        claims = {c.event_id: c for c in _claim(ingest, ["held", "fresh"])}
        processor.rollback()
    assert claims["held"].is_new is False
    assert claims["held"].counted is False  # answered from the stored row
    assert claims["fresh"].is_new is True
    with psycopg.connect(database_url) as check:
        rows = check.execute(
            "SELECT event_id, delivery_count FROM webhook_events ORDER BY 1"
        ).fetchall()
    assert rows == [("fresh", 1), ("held", 1)]
