"""SNS and PayPal through the real ingest handler (PostgreSQL, moto SQS), signed by the sample
providers' development pins (events/providers.local.json), in every event shape: stored once
under the signed id, a confirmation answered and never stored, a certificate that cannot be had
answered 503 with Retry-After (reason ``sender``), a forgery 401, and odd bodies refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.cert_authority import leaf
from tests.ingest_support import SHAPES
from tests.integration.ingest.conftest import IngestHarness, providers_config, row_count
from tests.support import FakeLambdaContext
from webhook_inbox.errors import SenderUnavailable
from webhook_inbox.ingest import providers
from webhook_inbox.ingest.schemes import certificate_fetch

SNS_TOPIC = "arn:aws:sns:us-east-1:123456789012:ses-notifications"
BOUNCE = json.dumps({"notificationType": "Bounce", "bounce": {"bounceType": "Permanent"}})


@pytest.fixture
def senders(harness: IngestHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The sample providers plus an SNS one that fetches (nothing pinned); every GET recorded
    and refused, as a certificate host out of reach would be."""
    config = providers_config()
    config["providers"]["sns-fetch"] = {
        "scheme": "sns",
        "options": {"topic_arns": [SNS_TOPIC]},
    }
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    providers.reset_for_tests()
    calls: list[str] = []

    def unreachable(url: str, *, what: str, budget_s: float = 0, cause: str = "") -> bytes:
        calls.append(url)
        raise SenderUnavailable(f"{what}: unreachable", cause=cause or "fetch_failed")

    monkeypatch.setattr(certificate_fetch, "https_get", unreachable)
    certificate_fetch.CACHE.clear()
    yield calls
    certificate_fetch.CACHE.clear()


def invoke(harness: IngestHarness, provider: str, signed: Any, shape: str = "v2") -> Any:
    event = SHAPES[shape](provider, signed.body, signed.headers)
    return harness.app.handler(event, FakeLambdaContext())


def sns_signed(harness: IngestHarness, body: dict[str, Any] | None = None, **kw: Any) -> Any:
    raw = json.dumps(body or {"Type": "Notification", "Message": BOUNCE}).encode()
    return providers.sign_delivery(providers.registry()["sns"], raw, timestamp=harness.now, **kw)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_an_sns_notification_is_stored_once_under_its_message_id(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any], shape: str
) -> None:
    signed = sns_signed(harness, event_id=f"msg-{shape}")
    first, again = invoke(harness, "sns", signed, shape), invoke(harness, "sns", signed, shape)
    assert (first["statusCode"], again["statusCode"]) == (200, 200)
    assert json.loads(again["body"]) == {"status": "duplicate"}
    row = conn.execute(
        "SELECT event_type, delivery_count, payload->>'Message' FROM webhook_events"
        " WHERE provider = 'sns' AND event_id = %s",
        (f"msg-{shape}",),
    ).fetchone()
    assert row == ("Bounce", 2, BOUNCE)
    assert senders == []  # pinned: nothing fetched


def test_a_paypal_delivery_is_stored_under_the_body_id(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body = json.dumps({"id": "WH-int-1", "event_type": "PAYMENT.CAPTURE.COMPLETED"}).encode()
    signed = providers.sign_delivery(providers.registry()["paypal"], body, timestamp=harness.now)
    assert invoke(harness, "paypal", signed)["statusCode"] == 202
    forged = type(signed)(signed.headers, body.replace(b"WH-int-1", b"WH-int-2"), signed.url)
    assert invoke(harness, "paypal", forged)["statusCode"] == 401
    ids = conn.execute("SELECT event_id FROM webhook_events WHERE provider = 'paypal'")
    assert [r[0] for r in ids] == ["WH-int-1"]


def test_a_confirmation_is_answered_and_never_stored(
    senders: list[str],
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    confirmed: list[str] = []
    monkeypatch.setattr(
        certificate_fetch, "https_get", lambda url, **_: confirmed.append(url) or b"<ok/>"
    )
    subscribe = "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=t1"
    signed = sns_signed(
        harness,
        {
            "Type": "SubscriptionConfirmation",
            "Message": "You have chosen to subscribe",
            "Token": "t1",
            "SubscribeURL": subscribe,
        },
    )
    answer = invoke(harness, "sns", signed)
    assert answer["statusCode"] == 200
    assert confirmed == [subscribe]
    assert row_count(conn) == 0


def test_a_certificate_out_of_reach_is_503_with_retry_after(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    signed = sns_signed(harness)  # names the dev pin's URL, which sns-fetch must download
    answer = invoke(harness, "sns-fetch", signed)
    assert answer["statusCode"] == 503
    assert answer["headers"]["Retry-After"] == "5"
    assert senders == ["https://sns.us-east-1.amazonaws.com/SimpleNotificationService-dev-only.pem"]
    assert row_count(conn) == 0


def test_an_unpinned_certificate_is_503_and_logged_as_sender(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    from webhook_inbox.ingest import pipeline

    other = leaf().pin("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-new.pem")
    provider = providers.registry()["sns"]
    signed = provider.scheme.sign(other, json.dumps({"Type": "Notification", "Message": "x"})
                                  .encode(), timestamp=harness.now)  # fmt: skip
    outcome = pipeline.handle(
        SHAPES["v2"]("sns", signed.body, signed.headers),
        sqs_client=harness.app.sqs_client,
        settings=harness.app.settings,
    )
    assert (outcome.status, outcome.outcome, outcome.reason) == (503, "unavailable", "sender")
    assert outcome.detail is not None
    assert outcome.detail.startswith("not_pinned")
    assert senders == []
    assert row_count(conn) == 0


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b"[]",
        b"null",
        b'{"Type":"Notification"}',
        b"\xef\xbb\xbf{}",
        b"\x00",
        b"{" * 5000,
    ],
)
def test_odd_bodies_are_refused_without_a_row(
    senders: list[str], harness: IngestHarness, conn: psycopg.Connection[Any], body: bytes
) -> None:
    signed = sns_signed(harness)
    for provider, headers in (("sns", signed.headers), ("paypal", {})):
        event = SHAPES["v2"](provider, body, headers, base64_body=True)
        status = harness.app.handler(event, FakeLambdaContext())["statusCode"]
        assert status in (400, 401), (provider, body[:10])
    assert row_count(conn) == 0
    assert senders == []
