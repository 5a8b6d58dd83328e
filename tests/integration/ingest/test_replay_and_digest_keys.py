"""Issue 12 through the ingest handler and a real PostgreSQL.

1. A captured ``hmac-sha256`` delivery replayed under a mutated (unsigned-text) id header is a 401
   and stores nothing: the signed content is rendered without re-reading substituted values.
2. Schemes keyed by a body digest include the event type in the key: the same bytes under two
   types are two events (Shopify ``orders/create`` + ``orders/paid``), a redelivery of the same
   type is still a duplicate, and rows stored before the change keep their old key.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from tests.ingest_support import SHAPES
from tests.integration.ingest.conftest import IngestHarness, row_count
from tests.integration.processing.helpers import failures, invoke, sqs_event_for
from tests.support import load_function
from webhook_inbox.processing import handlers
from webhook_inbox.processing.domain import Handler
from webhook_inbox.store import inbox

ID_MUTATIONS = {
    "id+{timestamp}": lambda i, t: i + "{timestamp}",
    "{timestamp}+id": lambda i, t: "{timestamp}" + i,
    "id+{timestamp}x2": lambda i, t: i + "{timestamp}{timestamp}",
    "timestamp digits->{timestamp}": lambda i, t: i.replace(t, "{timestamp}"),
    "id+{id}": lambda i, t: i + "{id}",
    "id+{body}": lambda i, t: i + "{body}",
    "id+braces": lambda i, t: "{" + i + "}",
    "id+separator": lambda i, t: i + ".",
    "separator+timestamp": lambda i, t: f"{i}.{t}",
}


@pytest.mark.parametrize(
    ("provider", "id_header"),
    [("acme-signed-id", "X-Acme-Event-Id"), ("acme-timestamped", "X-Webhook-Id")],
)
@pytest.mark.parametrize("mutation", ID_MUTATIONS)
def test_a_captured_delivery_replayed_under_a_mutated_id_is_401_and_stores_nothing(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    provider: str,
    id_header: str,
    mutation: str,
) -> None:
    # The sender's ids carry the timestamp's digits, as issue 12's second case needs.
    captured_id = f"evt_{harness.now}"
    body = b'{"type":"thing.happened","value":1}'
    headers = harness.sign(provider, body, event_id=captured_id)
    assert harness.deliver(provider, body, headers).status == 202

    forged_id = ID_MUTATIONS[mutation](captured_id, str(harness.now))
    assert forged_id != captured_id
    reply = harness.deliver(provider, body, {**headers, id_header: forged_id})

    assert (reply.status, reply.body) == (401, {"error": "unauthorized"})
    assert row_count(conn) == 1


@pytest.mark.parametrize("zeros", [1, 2])
def test_zeros_moved_from_the_id_into_an_adjacent_timestamp_are_401_and_store_nothing(
    harness: IngestHarness, conn: psycopg.Connection[Any], zeros: int
) -> None:
    # "{id}{timestamp}": "evt_1" + "00<ts>" is the same signed text as "evt_100" + "<ts>".
    body = b'{"type":"thing.happened","value":1}'
    headers = harness.sign("acme-adjacent", body, event_id="evt_100", timestamp=harness.now)
    assert harness.deliver("acme-adjacent", body, headers).status == 202

    forged = {
        **headers,
        "X-Acme-Event-Id": "evt_1" + "0" * (2 - zeros),
        "X-Acme-Timestamp": "0" * zeros + str(harness.now),
    }
    reply = harness.deliver("acme-adjacent", body, forged)

    assert (reply.status, reply.body) == (401, {"error": "unauthorized"})
    assert row_count(conn) == 1


def digest_key(event_type: str, body: bytes) -> str:
    return "sha256:" + hashlib.sha256(event_type.encode() + b"\x00" + body).hexdigest()


def order_body() -> bytes:
    return json.dumps({"id": uuid.uuid4().int % 10**12, "financial_status": "paid"}).encode()


def test_shopify_one_order_under_two_topics_is_two_events_both_processed(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shopify sends the same order JSON to orders/create and orders/paid when paid at checkout.
    body = order_body()
    seen: list[str] = []

    def record(_conn: psycopg.Connection[Any], event: inbox.LeasedEvent) -> None:
        seen.append(event.event_type)

    registry: dict[tuple[str, str], Handler] = dict(handlers.HANDLERS)
    registry[("shopify", "orders/create")] = record
    registry[("shopify", "orders/paid")] = record
    monkeypatch.setattr(handlers, "HANDLERS", registry)

    for topic in ("orders/create", "orders/paid"):
        headers = harness.sign("shopify", body, event_id=str(uuid.uuid4()), event_type=topic)
        assert harness.deliver("shopify", body, headers).status == 202

    rows = conn.execute(
        "SELECT id, event_id, event_type FROM webhook_events ORDER BY event_type"
    ).fetchall()
    assert [(r[1], r[2]) for r in rows] == [
        (digest_key("orders/create", body), "orders/create"),
        (digest_key("orders/paid", body), "orders/paid"),
    ]
    response = invoke(load_function("processor"), sqs_event_for([r[0] for r in rows]))
    assert failures(response) == []
    statuses = conn.execute("SELECT status FROM webhook_events").fetchall()
    assert statuses == [("processed",), ("processed",)]
    assert sorted(seen) == ["orders/create", "orders/paid"]


def test_github_one_body_under_two_event_headers_is_two_rows(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    for event in ("ping", "meta"):
        headers = harness.sign("github", body, event_id=str(uuid.uuid4()), event_type=event)
        assert harness.deliver("github", body, headers).status == 202
    types = conn.execute("SELECT event_type FROM webhook_events ORDER BY 1").fetchall()
    assert types == [("meta",), ("ping",)]


@pytest.mark.parametrize(
    ("provider", "event_type"), [("shopify", "orders/paid"), ("github", "ping")]
)
def test_same_type_and_bytes_with_a_fresh_delivery_id_is_still_a_duplicate(
    harness: IngestHarness, conn: psycopg.Connection[Any], provider: str, event_type: str
) -> None:
    body = order_body()
    first = harness.sign(provider, body, event_id=str(uuid.uuid4()), event_type=event_type)
    again = harness.sign(provider, body, event_id=str(uuid.uuid4()), event_type=event_type)
    assert harness.deliver(provider, body, first).status == 202
    assert harness.deliver(provider, body, again).status == 200
    assert row_count(conn) == 1


@pytest.mark.parametrize(
    ("provider", "types"),
    [("shopify", ("orders/create", "orders/paid")), ("github", ("meta", "ping"))],
)
def test_twenty_concurrent_deliveries_of_each_type_store_one_row_per_type(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    connection_per_thread: Callable[..., Any],
    provider: str,
    types: tuple[str, str],
) -> None:
    body = order_body()
    # Each delivery carries its own delivery id, as a provider's retries and a replayer's do.
    events = [
        SHAPES["v2"](
            provider,
            body,
            harness.sign(provider, body, event_id=str(uuid.uuid4()), event_type=types[n % 2]),
        )
        for n in range(40)
    ]
    harness.app.sqs_client()  # created before the race, as in a warm container
    barrier = threading.Barrier(40)

    def deliver(n: int) -> int:
        connection_per_thread()
        barrier.wait(timeout=30)
        return harness.invoke(events[n]).status

    with ThreadPoolExecutor(max_workers=40) as pool:
        statuses = list(pool.map(deliver, range(40)))
    assert sorted(statuses) == [200] * 38 + [202] * 2
    rows = conn.execute(
        "SELECT event_type, delivery_count FROM webhook_events ORDER BY 1"
    ).fetchall()
    assert rows == [(types[0], 20), (types[1], 20)]


def test_a_redelivery_across_the_upgrade_is_one_new_row_then_duplicates(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    # A row stored before the key covered the type: its key is the digest of the body alone.
    body = order_body()
    legacy_key = "sha256:" + hashlib.sha256(body).hexdigest()
    inbox.claim_event(
        conn,
        provider="shopify",
        event_id=legacy_key,
        event_type="orders/create",
        body_sha256=hashlib.sha256(body).digest(),
        payload=json.loads(body),
    )
    headers = harness.sign("shopify", body, event_id=str(uuid.uuid4()), event_type="orders/create")

    # The provider's retry after the upgrade does not find the old key: one more row, once.
    assert harness.deliver("shopify", body, headers).status == 202
    assert harness.deliver("shopify", body, headers).status == 200
    keys = conn.execute(
        "SELECT event_id, delivery_count FROM webhook_events ORDER BY id"
    ).fetchall()
    assert keys == [(legacy_key, 1), (digest_key("orders/create", body), 2)]
