"""Google Pub/Sub push, Plaid and the App Store through the real ingest handler (PostgreSQL, moto
SQS), signed by the sample providers' development pins (events/providers.local.json): stored
once under the key each scheme documents, a replay a duplicate, a forgery 401, a key nobody
pinned or a key set out of reach 503 with Retry-After (reason ``sender``), odd bodies refused
without a row and without a download."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.ingest_support import SHAPES
from tests.integration.ingest.conftest import IngestHarness, providers_config, row_count
from tests.support import FakeLambdaContext
from tests.token_keys import private_jwk_text
from webhook_inbox.errors import SenderUnavailable
from webhook_inbox.ingest import pipeline, providers
from webhook_inbox.ingest.schemes import certificate_fetch, key_sets

ENVELOPE = {
    "message": {"data": "eyJ2ZXJzaW9uIjoiMS4wIn0=", "messageId": "int-msg-1", "attributes": {}},
    "subscription": "projects/dev-project/subscriptions/dev-push",
}
PLAID_BODY = json.dumps(
    {"webhook_type": "ITEM", "webhook_code": "ERROR", "item_id": "item-1"}, indent=2
).encode()
APPLE = {
    "notificationType": "DID_RENEW",
    "notificationUUID": "5f0c6a43-int-test",
    "data": {"bundleId": "com.example.devapp", "environment": "Sandbox"},
}


@pytest.fixture
def senders(harness: IngestHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The sample providers plus a Google one that downloads Google's key set, whose host is
    out of reach (every GET recorded and refused)."""
    config = providers_config()
    config["providers"]["google-fetch"] = {
        "scheme": "google-pubsub",
        "options": config["providers"]["google-pubsub"]["options"] | {"keys": "fetch"},
    }
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    providers.reset_for_tests()
    calls: list[str] = []

    def unreachable(url: str, *, what: str, **_: Any) -> tuple[bytes, str | None]:
        calls.append(url)
        raise SenderUnavailable(f"{what}: unreachable", cause="fetch_failed")

    monkeypatch.setattr(certificate_fetch, "https_get_response", unreachable)
    key_sets.CACHE.clear()
    certificate_fetch.BUDGET.clear()
    yield calls
    key_sets.CACHE.clear()


def signed(harness: IngestHarness, provider: str, body: bytes, **kw: Any) -> Any:
    return providers.sign_delivery(
        providers.registry()[provider], body, timestamp=harness.now, **kw
    )


def invoke(harness: IngestHarness, provider: str, delivery: Any, shape: str = "v2") -> Any:
    event = SHAPES[shape](provider, delivery.body, delivery.headers)
    return harness.app.handler(event, FakeLambdaContext())


def keys(conn: psycopg.Connection[Any], provider: str) -> list[tuple[str, str, int]]:
    return conn.execute(
        "SELECT event_id, event_type, delivery_count FROM webhook_events WHERE provider = %s",
        (provider,),
    ).fetchall()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_push_is_stored_once_under_its_message_id(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any], shape: str
) -> None:
    delivery = signed(harness, "google-pubsub", json.dumps(ENVELOPE).encode())
    first, again = (invoke(harness, "google-pubsub", delivery, shape) for _ in range(2))
    assert (first["statusCode"], again["statusCode"]) == (202, 200)
    assert keys(conn, "google-pubsub") == [("int-msg-1", "dev-push", 2)]
    assert senders == []  # pinned: nothing fetched


def test_plaid_is_keyed_by_the_signed_body_and_a_changed_body_is_401(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    delivery = signed(harness, "plaid", PLAID_BODY)
    assert invoke(harness, "plaid", delivery)["statusCode"] == 202
    retry = signed(harness, "plaid", PLAID_BODY)  # a new token over the same bytes
    assert invoke(harness, "plaid", retry)["statusCode"] == 200
    forged = type(delivery)(delivery.headers, PLAID_BODY.replace(b"item-1", b"item-2"), "")
    assert invoke(harness, "plaid", forged)["statusCode"] == 401
    ((event_id, event_type, count),) = keys(conn, "plaid")
    assert (event_id[:7], event_type, count) == ("sha256:", "ITEM.ERROR", 2)


def test_an_app_store_notification_is_stored_decoded_under_its_uuid(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    delivery = signed(harness, "app-store", json.dumps(APPLE).encode())
    assert invoke(harness, "app-store", delivery)["statusCode"] == 202
    # Apple's retry (or a replay) of the same signed notification meets its row.
    assert invoke(harness, "app-store", delivery)["statusCode"] == 200
    row = conn.execute(
        "SELECT event_id, event_type, payload->'data'->>'bundleId' FROM webhook_events"
        " WHERE provider = 'app-store'"
    ).fetchone()
    assert row == ("5f0c6a43-int-test", "DID_RENEW", "com.example.devapp")


def test_a_kid_nobody_pinned_is_503_and_logged_as_sender(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for provider, kind in (("google-pubsub", "rsa"), ("plaid", "ec")):
        scheme = providers.registry()[provider].scheme
        body = json.dumps(ENVELOPE).encode() if provider == "google-pubsub" else PLAID_BODY
        delivery = scheme.sign(
            private_jwk_text(f"new-{provider}", kind), body, timestamp=harness.now
        )
        outcome = pipeline.handle(
            SHAPES["v2"](provider, delivery.body, delivery.headers),
            sqs_client=harness.app.sqs_client,
            settings=harness.app.settings,
        )
        assert (outcome.status, outcome.outcome, outcome.reason) == (503, "unavailable", "sender")
        assert outcome.detail is not None
        assert outcome.detail.startswith("not_pinned")
        assert outcome.response()["headers"]["Retry-After"] == "5"
    assert row_count(conn) == 0


def test_a_key_set_out_of_reach_is_503_with_retry_after(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    delivery = signed(harness, "google-pubsub", json.dumps(ENVELOPE).encode())
    answer = invoke(harness, "google-fetch", delivery)
    assert answer["statusCode"] == 503
    assert answer["headers"]["Retry-After"] == "5"
    assert senders == ["https://www.googleapis.com/oauth2/v3/certs"]
    assert invoke(harness, "google-fetch", delivery)["statusCode"] == 503
    assert len(senders) == 1  # the failure is remembered: no second download
    assert row_count(conn) == 0


@pytest.mark.parametrize(
    "body",
    [b"", b"{}", b"[]", b"null", b'{"signedPayload":"a.b.c"}', b"\xef\xbb\xbf{}", b"\x00",
     b"{" * 5000],
)  # fmt: skip
def test_odd_bodies_are_refused_without_a_row(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any], body: bytes
) -> None:
    google = signed(harness, "google-pubsub", json.dumps(ENVELOPE).encode())
    plaid = signed(harness, "plaid", PLAID_BODY)
    for provider, headers in (
        ("google-pubsub", google.headers), ("plaid", plaid.headers), ("app-store", {}),
    ):  # fmt: skip
        event = SHAPES["v2"](provider, body, headers, base64_body=True)
        status = harness.app.handler(event, FakeLambdaContext())["statusCode"]
        assert status in (400, 401), (provider, body[:10])
    assert row_count(conn) == 0
    assert senders == []
