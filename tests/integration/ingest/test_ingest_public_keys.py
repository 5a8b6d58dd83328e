"""Public-key senders through the real ingest handler (PostgreSQL, moto SQS): Standard Webhooks
v1a, Discord (Interactions and Webhook Events) and SendGrid, delivered as REST v1, HTTP API v2
and Function URL events to providers configured as in production, with public keys only.

The deliveries are signed with the private keys of the sample providers
(events/providers.local.json), which hold the other half of each configured public key.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.ingest_support import SHAPES
from tests.integration.ingest.conftest import IngestHarness, providers_config, row_count
from tests.support import FakeLambdaContext
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import providers

SHAPE_VARIANTS = [(shape, b64) for shape in SHAPES for b64 in (False, True)]
# SendGrid's published vector (sendgrid-python test/unit/test_eventwebhook.py).
SG_KAT_KEY = (
    "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw"
    "+2fNNRaINXvVpiglSI8eNEc6wEA3F+g=="
)
SG_KAT_TIMESTAMP = 1600112502
SG_KAT_SIGNATURE = (
    "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtE"
    "ZtM="
)
SG_KAT_BODY = (
    b'[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address",'
    b'"sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA",'
    b'"sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",'
    b'"smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]'
    b"\r\n"
)

# Production-shaped providers (public keys only) and the sample provider that signs for each.
SIGNED_BY = {
    "v1a-pub": "webhooks-v1a",
    "discord-pub": "discord",
    "discord-events-pub": "discord-events",
    "sendgrid-pub": "sendgrid",
}


@pytest.fixture
def keyed(harness: IngestHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[IngestHarness]:
    config = providers_config()
    sample = config["providers"]
    extra: dict[str, Any] = {}
    for name, signer in SIGNED_BY.items():
        spec = dict(sample[signer])
        private = providers.registry()[signer]
        spec["secrets"] = [{"value": private.scheme.public_key(private.secrets()[0])}]
        extra[name] = spec
    # One byte of the Discord key changed: every signature made with the real key fails.
    real = bytes.fromhex(extra["discord-pub"]["secrets"][0]["value"])
    wrong = bytes([real[0] ^ 1]) + real[1:]
    extra["discord-wrong-key"] = {**extra["discord-pub"], "secrets": [{"value": wrong.hex()}]}
    extra["sendgrid-kat"] = {"scheme": "sendgrid", "secrets": [{"value": SG_KAT_KEY}]}
    sample.update(extra)
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    providers.reset_for_tests()
    yield harness
    providers.reset_for_tests()


@dataclass
class Answer:
    status: int
    body: str
    content_type: str

    def json(self) -> Any:
        return json.loads(self.body)


def deliver(
    harness: IngestHarness,
    provider: str,
    body: bytes,
    headers: dict[str, str],
    *,
    shape: str = "v2",
    base64_body: bool = False,
) -> Answer:
    event = SHAPES[shape](provider, body, headers, base64_body=base64_body)
    raw = harness.app.handler(event, FakeLambdaContext())
    return Answer(raw["statusCode"], raw["body"], raw["headers"]["Content-Type"])


def sign(harness: IngestHarness, provider: str, body: bytes, **kwargs: Any) -> dict[str, str]:
    return harness.sign(SIGNED_BY.get(provider, provider), body, **kwargs)


def rows(conn: psycopg.Connection[Any], provider: str) -> list[tuple[str, str, int, Any]]:
    found = conn.execute(
        "SELECT event_id, event_type, delivery_count, payload FROM webhook_events"
        " WHERE provider = %s ORDER BY event_id",
        (provider,),
    ).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in found]


def _uid() -> str:
    return uuid.uuid4().hex[:12]


def v1a_delivery(harness: IngestHarness) -> tuple[bytes, dict[str, str], list[str]]:
    msg_id = f"msg_{_uid()}"
    body = b'{"type":"invoice.paid","data":{"id":"in_1"}}'
    headers = sign(harness, "v1a-pub", body, event_id=msg_id)
    assert headers["webhook-signature"].startswith("v1a,")
    return body, headers, [msg_id]


def interaction(harness: IngestHarness) -> tuple[bytes, dict[str, str], list[str]]:
    interaction_id = str(uuid.uuid4().int % 10**19)
    body = json.dumps(
        {"type": 2, "id": interaction_id, "token": "tok", "data": {"name": "hello"}, "version": 1}
    ).encode()
    return body, sign(harness, "discord-pub", body), [interaction_id]


def webhook_event(harness: IngestHarness) -> tuple[bytes, dict[str, str], list[str]]:
    body = json.dumps(
        {
            "version": 1,
            "application_id": "1",
            "type": 1,
            "event": {"type": "ENTITLEMENT_CREATE", "data": {"id": _uid()}},
        }
    ).encode()
    return body, sign(harness, "discord-events-pub", body), []  # digest-keyed


def sendgrid_batch(harness: IngestHarness) -> tuple[bytes, dict[str, str], list[str]]:
    ids = [f"sg_{_uid()}", f"sg_{_uid()}"]
    events = [{"event": "delivered", "email": "a@example.com", "sg_event_id": i} for i in ids]
    body = json.dumps(events).encode() + b"\r\n"
    return body, sign(harness, "sendgrid-pub", body), sorted(ids)


ACCEPTED, DUPLICATE = (202, '{"status":"accepted"}'), (200, '{"status":"duplicate"}')
# provider: (delivery builder, (status, body) when new, when a duplicate, rows per delivery)
CASES = {
    "v1a-pub": (v1a_delivery, ACCEPTED, DUPLICATE, 1),
    "discord-pub": (interaction, (200, '{"type":5}'), (200, '{"type":5}'), 1),
    "discord-events-pub": (webhook_event, (204, ""), (204, ""), 1),
    "sendgrid-pub": (sendgrid_batch, ACCEPTED, DUPLICATE, 2),
}


@pytest.mark.parametrize("provider", sorted(CASES))
@pytest.mark.parametrize(("shape", "base64_body"), SHAPE_VARIANTS)
def test_an_authentic_delivery_is_stored_once_and_acknowledged_as_the_sender_expects(
    keyed: IngestHarness,
    conn: psycopg.Connection[Any],
    provider: str,
    shape: str,
    base64_body: bool,
) -> None:
    build, new, duplicate, count = CASES[provider]
    body, headers, ids = build(keyed)

    first = deliver(keyed, provider, body, headers, shape=shape, base64_body=base64_body)
    assert (first.status, first.body) == new
    stored = rows(conn, provider)
    assert len(stored) == count
    if ids:
        assert [r[0] for r in stored] == ids
    assert len(keyed.queued()) == count

    again = deliver(keyed, provider, body, headers, shape=shape, base64_body=base64_body)
    assert (again.status, again.body) == duplicate
    assert [r[:2] for r in rows(conn, provider)] == [r[:2] for r in stored]
    assert {r[2] for r in rows(conn, provider)} == {2}
    assert keyed.queued() == []


def _flip_char(value: str, at: int) -> str:
    replacement = "A" if value[at] != "A" else "B"
    if value[at] in "0123456789abcdef":  # keep hex hex
        replacement = "0" if value[at] != "0" else "1"
    return value[:at] + replacement + value[at + 1 :]


def _tamperings(body: bytes, headers: dict[str, str]) -> dict[str, tuple[bytes, dict[str, str]]]:
    signature = next(n for n in headers if "ignature" in n)
    timestamp = next(n for n in headers if "imestamp" in n)
    value = headers[signature]
    # A character in the middle of the signature (never base64's partial last character).
    flipped = _flip_char(value, len(value) // 2)
    middle = len(body) // 2
    return {
        "body byte": (body[:middle] + bytes([body[middle] ^ 1]) + body[middle + 1 :], headers),
        "signature": (body, {**headers, signature: flipped}),
        "timestamp": (body, {**headers, timestamp: str(int(headers[timestamp]) + 1)}),
        "timestamp missing": (body, {k: v for k, v in headers.items() if k != timestamp}),
        "signature missing": (body, {k: v for k, v in headers.items() if k != signature}),
    }


@pytest.mark.parametrize("provider", sorted(CASES))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_one_changed_byte_anywhere_signed_is_a_401_and_no_row(
    keyed: IngestHarness, conn: psycopg.Connection[Any], provider: str, shape: str
) -> None:
    body, headers, _ = CASES[provider][0](keyed)
    for what, (changed_body, changed_headers) in _tamperings(body, headers).items():
        answer = deliver(keyed, provider, changed_body, changed_headers, shape=shape)
        assert (answer.status, answer.json()) == (401, {"error": "unauthorized"}), what
    assert row_count(conn) == 0


def test_a_delivery_checked_against_a_key_one_byte_off_is_a_401(
    keyed: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers, _ = interaction(keyed)
    answer = deliver(keyed, "discord-wrong-key", body, headers)
    assert (answer.status, answer.json()) == (401, {"error": "unauthorized"})
    assert deliver(keyed, "discord-pub", body, headers).status == 200  # the real key verifies
    assert [r[0] for r in rows(conn, "discord-wrong-key")] == []


@pytest.mark.parametrize("provider", sorted(CASES))
def test_stale_and_future_timestamps_are_a_401(
    keyed: IngestHarness, conn: psycopg.Connection[Any], provider: str
) -> None:
    tolerance = providers.registry()[provider].tolerance_seconds
    body = CASES[provider][0](keyed)[0]
    for skew in (-(tolerance + 1), tolerance + 1):
        headers = sign(keyed, provider, body, timestamp=keyed.now + skew, event_id="msg_skew")
        assert deliver(keyed, provider, body, headers).status == 401, skew
    assert row_count(conn) == 0
    headers = sign(keyed, provider, body, timestamp=keyed.now - tolerance, event_id="msg_edge")
    assert deliver(keyed, provider, body, headers).status < 300  # the window is inclusive


@pytest.mark.parametrize(
    ("provider", "ping", "answer"),
    [
        ("discord-pub", {"type": 1, "id": "1", "application_id": "2", "token": "t"}, '{"type":1}'),
        ("discord-events-pub", {"version": 1, "application_id": "2", "type": 0}, ""),
    ],
)
def test_discord_pings_are_answered_only_when_authentic_and_never_stored(
    keyed: IngestHarness,
    conn: psycopg.Connection[Any],
    provider: str,
    ping: dict[str, Any],
    answer: str,
) -> None:
    body = json.dumps(ping).encode()
    headers = sign(keyed, provider, body)
    reply = deliver(keyed, provider, body, headers)
    assert (reply.status, reply.body, reply.content_type) == (
        200 if answer else 204,
        answer,
        "application/json",
    )
    forged = {**headers, "X-Signature-Ed25519": "00" * 64}
    assert deliver(keyed, provider, body, forged).status == 401
    assert row_count(conn) == 0
    assert keyed.queued() == []


def test_discord_autocomplete_is_answered_with_no_choices_and_not_stored(
    keyed: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body = b'{"type":4,"id":"77","data":{"name":"pick","options":[]}}'
    reply = deliver(keyed, "discord-pub", body, sign(keyed, "discord-pub", body))
    assert (reply.status, reply.json()) == (200, {"type": 8, "data": {"choices": []}})
    assert row_count(conn) == 0


def _sendgrid(harness: IngestHarness, events: list[dict[str, Any]]) -> Answer:
    body = json.dumps(events).encode()
    return deliver(harness, "sendgrid-pub", body, sign(harness, "sendgrid-pub", body))


def test_a_sendgrid_batch_overlapping_a_stored_one_stores_only_its_new_events(
    keyed: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    a, b, c = ({"event": "open", "sg_event_id": f"sg_{n}", "email": "x@example.com"} for n in "abc")
    assert _sendgrid(keyed, [a, b]).status == 202
    assert len(keyed.queued()) == 2

    overlapping = _sendgrid(keyed, [b, c])
    assert (overlapping.status, overlapping.json()) == (202, {"status": "accepted"})
    assert [(r[0], r[2]) for r in rows(conn, "sendgrid-pub")] == [
        ("sg_a", 1),
        ("sg_b", 2),
        ("sg_c", 1),
    ]
    assert len(keyed.queued()) == 1  # only sg_c woke the processor

    known = _sendgrid(keyed, [c, a])
    assert (known.status, known.json()) == (200, {"status": "duplicate"})
    assert [(r[0], r[2]) for r in rows(conn, "sendgrid-pub")] == [
        ("sg_a", 2),
        ("sg_b", 2),
        ("sg_c", 2),
    ]
    assert keyed.queued() == []


def test_sendgrid_events_without_sg_event_id_are_keyed_by_their_content(
    keyed: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    event = {"event": "group_resubscribe", "email": "x@example.com", "timestamp": 1}
    assert _sendgrid(keyed, [event]).status == 202
    # The same event again, re-serialised with other spacing and key order: a duplicate.
    respaced = json.dumps([dict(reversed(event.items()))], indent=2).encode()
    again = deliver(keyed, "sendgrid-pub", respaced, sign(keyed, "sendgrid-pub", respaced))
    assert again.status == 200
    (stored,) = rows(conn, "sendgrid-pub")
    assert stored[0].startswith("sha256:")
    assert (stored[1], stored[2], stored[3]) == ("group_resubscribe", 2, event)


def test_sendgrid_known_answer_is_accepted_through_ingest(
    keyed: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {
        "X-Twilio-Email-Event-Webhook-Signature": SG_KAT_SIGNATURE,
        "X-Twilio-Email-Event-Webhook-Timestamp": str(SG_KAT_TIMESTAMP),
    }
    monkeypatch.setattr(ingest, "current_time", lambda: float(SG_KAT_TIMESTAMP))
    for shape in sorted(SHAPES):
        assert deliver(keyed, "sendgrid-kat", SG_KAT_BODY, headers, shape=shape).status in {
            200,
            202,
        }
    (stored,) = rows(conn, "sendgrid-kat")
    assert stored[:3] == ("ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA", "dropped", 3)
    assert stored[3] == json.loads(SG_KAT_BODY)[0]
    tampered = SG_KAT_BODY.replace(b"dropped", b"Dropped")
    assert deliver(keyed, "sendgrid-kat", tampered, headers).status == 401
