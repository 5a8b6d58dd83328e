"""The named presets through the ingest handler (real PostgreSQL, moto SQS), every event shape:
an authentic sample is stored once and answered as its sender expects, its redelivery is a
duplicate, and a flipped byte, a body over the limit or a signed body that is not an event
stores nothing."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from tests.integration.ingest.conftest import IngestHarness, row_count
from tests.integration.ingest.senders import SHAPE_VARIANTS, answer, events
from webhook_inbox.ingest import providers
from webhook_inbox_tools import sample_events

PRESETS = [
    "clerk", "resend", "openai", "replicate", "polar", "intercom", "bitbucket", "jira", "gitea",
    "typeform", "sentry", "vercel", "lemonsqueezy", "razorpay", "coinbase-commerce",
    "checkout-com", "cal-com", "woocommerce", "calendly", "mux", "zendesk", "docusign", "telegram",
]  # fmt: skip
# Senders that count only 200 as success (docs/providers.md, "Named presets").
ANSWERED_200 = {"lemonsqueezy", "coinbase-commerce", "docusign"}
# Senders whose type is a header: any JSON object is an event of theirs (as for GitHub).
TYPED_BY_HEADER = {"bitbucket", "gitea", "sentry", "woocommerce"}


def delivery(harness: IngestHarness, name: str, body: bytes | None = None) -> tuple[bytes, dict]:
    provider = providers.registry()[name]
    catalog = sample_events.catalog(name)
    assert catalog is not None
    built = sample_events.build(provider, catalog.default, now=harness.now)
    body = built.body if body is None else body
    headers = harness.sign(name, body, event_id=built.event_id, event_type=catalog.default)
    return body, headers


@pytest.mark.parametrize("name", PRESETS)
def test_an_authentic_sample_is_stored_once_and_its_redelivery_is_a_duplicate(
    name: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    new_status = 200 if name in ANSWERED_200 else 202
    for shape, b64 in SHAPE_VARIANTS:
        body, headers = delivery(harness, name)
        first = answer(harness, name, body, headers, shape=shape, base64_body=b64)
        assert (first.status, json.loads(first.body)) == (new_status, {"status": "accepted"})
        again = answer(harness, name, body, headers, shape=shape, base64_body=b64)
        assert (again.status, json.loads(again.body)) == (200, {"status": "duplicate"})
    stored = events(conn, name)
    assert len(stored) == len(SHAPE_VARIANTS)
    assert {row["delivery_count"] for row in stored} == {2}
    assert len(harness.queued()) == len(SHAPE_VARIANTS)


@pytest.mark.parametrize("name", PRESETS)
def test_a_flipped_byte_an_oversized_body_or_a_signed_non_event_stores_nothing(
    name: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers = delivery(harness, name)
    tampered = body.replace(b"{", b"[", 1) if name != "telegram" else body
    if name == "telegram":  # no MAC over the body: the token is what is checked
        token = "x-telegram-bot-api-secret-token"
        headers = {k: (v + "x" if k.lower() == token else v) for k, v in headers.items()}
    assert answer(harness, name, tampered, headers).status == 401
    oversized = json.dumps({"pad": "x" * (1024 * 1024)}).encode()
    _, signed_big = delivery(harness, name, body=oversized)
    assert answer(harness, name, oversized, signed_big).status == 413
    not_events = [b"[]", b"not json", b'{"a": NaN}']
    if name not in TYPED_BY_HEADER:
        not_events.append(b'{"unrelated": true}')  # no id or type where the sender puts them
    for not_an_event in not_events:
        _, signed_odd = delivery(harness, name, body=not_an_event)
        assert answer(harness, name, not_an_event, signed_odd).status == 400, not_an_event
    assert row_count(conn) == 0
    assert harness.queued() == []
