"""Property: whatever arrives, a healthy ingest answers 2xx/4xx and stores only signed events."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import psycopg
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.ingest_support import SHAPES
from tests.integration.ingest.conftest import IngestHarness

PROVIDERS = ["acme", "acme-timestamped", "stripe", "github", "shopify", "slack", "svix", "x"]
KNOWN_HEADERS = [
    "X-Acme-Signature",
    "X-Webhook-Signature",
    "X-Webhook-Timestamp",
    "X-Webhook-Id",
    "Stripe-Signature",
    "X-Hub-Signature-256",
    "X-GitHub-Event",
    "X-Shopify-Hmac-Sha256",
    "X-Shopify-Topic",
    "X-Slack-Signature",
    "X-Slack-Request-Timestamp",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-signature",
]
header_values = st.one_of(
    st.text(max_size=80),
    st.from_regex(r"(sha256=|v0=|v1,|t=\d{1,11},v1=)[0-9a-f]{0,70}", fullmatch=True),
    st.integers(min_value=0, max_value=2**40).map(str),
)
headers = st.dictionaries(
    st.one_of(st.sampled_from(KNOWN_HEADERS), st.text(min_size=1, max_size=20)),
    header_values,
    max_size=6,
)
json_bodies = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
).map(lambda v: json.dumps(v).encode())
ids = st.text(min_size=1, max_size=12)
event_bodies = st.fixed_dictionaries(
    {"id": ids, "type": ids, "event_id": ids, "event": st.fixed_dictionaries({"type": ids})},
    optional={"action": ids, "data": st.dictionaries(st.text(max_size=5), st.integers())},
).map(lambda v: json.dumps(v).encode())
bodies = st.one_of(st.binary(max_size=300), json_bodies, event_bodies)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    provider=st.sampled_from(PROVIDERS),
    body=bodies,
    sent_headers=headers,
    shape=st.sampled_from(sorted(SHAPES)),
    base64_body=st.booleans(),
    sign=st.booleans(),
    event_type=st.sampled_from([None, "issues", "orders/create"]),
)
def test_any_delivery_gets_2xx_or_4xx_and_only_signed_bodies_are_stored(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    *,
    provider: str,
    body: bytes,
    sent_headers: dict[str, str],
    shape: str,
    base64_body: bool,
    sign: bool,
    event_type: str | None,
) -> None:
    signed_digests = harness.signed_digests  # shared across the examples of this test
    all_headers = dict(sent_headers)
    if sign and provider != "x":
        all_headers.update(harness.sign(provider, body, event_type=event_type))
        signed_digests.add(hashlib.sha256(body).digest())
    if not base64_body:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            base64_body = True  # a text body cannot carry these bytes
    reply = harness.deliver(provider, body, all_headers, shape=shape, base64_body=base64_body)
    event(f"status {reply.status}")
    assert 200 <= reply.status < 500, reply.body
    stored = {bytes(r[0]) for r in conn.execute("SELECT body_sha256 FROM webhook_events")}
    assert stored <= signed_digests
