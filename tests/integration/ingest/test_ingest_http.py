"""The ingest handler end to end (real PostgreSQL, moto SQS): DESIGN §4's contract, case by case."""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import standardwebhooks
import stripe
import svix.webhooks
from slack_sdk.signature import SignatureVerifier

from tests.ingest_support import FIXTURES, SHAPES
from tests.integration.ingest.conftest import (
    KAT_GITHUB_SECRET,
    KAT_SVIX_SECRET,
    ROTATING_SECRETS,
    IngestHarness,
    row_count,
    secret_of,
)
from tests.support import load_event
from webhook_inbox.errors import StoreUnavailable
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import providers
from webhook_inbox.store import db, inbox, inbox_upkeep

SHAPE_VARIANTS = [(shape, b64) for shape in SHAPES for b64 in (False, True)]


@dataclass
class Signed:
    provider: str
    body: bytes
    headers: dict[str, str]
    event_id: str  # the deduplication key expected in the row
    id_header: str | None = None  # a signed id header, when the scheme has one
    timestamp_header: str | None = None


def _uid() -> str:
    return uuid.uuid4().hex[:12]


def stripe_official(now: int) -> Signed:
    event_id = f"evt_{_uid()}"
    body = json.dumps({"id": event_id, "type": "customer.created", "data": {"n": 1}}).encode()
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret_of("stripe"), timestamp=now
    )
    return Signed("stripe", body, {"Stripe-Signature": header}, event_id)


def standardwebhooks_official(now: int) -> Signed:
    msg_id = f"msg_{_uid()}"
    body = b'{"type": "invoice.paid", "data": {"amount": 10}}'
    signature = standardwebhooks.Webhook(secret_of("svix")).sign(
        msg_id, datetime.fromtimestamp(now, tz=UTC), body.decode()
    )
    headers = {"Webhook-Id": msg_id, "Webhook-Timestamp": str(now), "Webhook-Signature": signature}
    return Signed("svix", body, headers, msg_id, "Webhook-Id", "Webhook-Timestamp")


def svix_official(now: int) -> Signed:
    msg_id = f"msg_{_uid()}"
    body = b'{"type":"user.created","data":{"id":"u1"}}'
    signature = svix.webhooks.Webhook(secret_of("svix")).sign(
        msg_id, datetime.fromtimestamp(now, tz=UTC), body.decode()
    )
    headers = {"svix-id": msg_id, "svix-timestamp": str(now), "svix-signature": signature}
    return Signed("svix", body, headers, msg_id, "svix-id", "svix-timestamp")


def slack_official(now: int) -> Signed:
    event_id = f"Ev{_uid()}"
    body = json.dumps(
        {"type": "event_callback", "event_id": event_id, "event": {"type": "app_mention"}}
    ).encode()
    signature = SignatureVerifier(secret_of("slack")).generate_signature(
        timestamp=str(now), body=body
    )
    assert signature is not None
    headers = {"X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": signature}
    return Signed("slack", body, headers, event_id, None, "X-Slack-Request-Timestamp")


def github_documented(now: int) -> Signed:
    # GitHub's documented construction: sha256= + hex HMAC of the raw body (KAT in unit tests).
    body = json.dumps({"action": "opened", "issue": {"number": _uid()}}).encode()
    import hmac

    digest = hmac.new(secret_of("github").encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": str(uuid.uuid4()),
    }
    digest_key = "sha256:" + hashlib.sha256(b"issues.opened\x00" + body).hexdigest()
    return Signed("github", body, headers, digest_key)


def shopify_ours(now: int) -> Signed:
    body = json.dumps({"id": int(uuid.uuid4().int % 10**12), "total": "1.00"}).encode()
    headers = providers.sign_delivery(
        providers.registry()["shopify"], body, event_id=_uid(), event_type="orders/create"
    ).headers
    digest_key = "sha256:" + hashlib.sha256(b"orders/create\x00" + body).hexdigest()
    return Signed("shopify", body, headers, digest_key)


def acme_timestamped_ours(now: int) -> Signed:
    event_id = f"evt_{_uid()}"
    body = b'{"type":"thing.happened","value":1}'
    headers = providers.sign_delivery(
        providers.registry()["acme-timestamped"], body, event_id=event_id, timestamp=now
    ).headers
    return Signed(
        "acme-timestamped", body, headers, event_id, "X-Webhook-Id", "X-Webhook-Timestamp"
    )


SIGNERS: dict[str, Callable[[int], Signed]] = {
    "stripe": stripe_official,
    "standardwebhooks": standardwebhooks_official,
    "svix": svix_official,
    "slack_sdk": slack_official,
    "github": github_documented,
    "shopify": shopify_ours,
    "hmac-sha256": acme_timestamped_ours,
}


def stored(conn: psycopg.Connection[Any], provider: str, event_id: str) -> dict[str, Any] | None:
    cur = conn.execute(
        "SELECT id, event_type, body_sha256, delivery_id, enqueued_at, payload, delivery_count"
        " FROM webhook_events WHERE provider = %s AND event_id = %s",
        (provider, event_id),
    )
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([c.name for c in cur.description or ()], row, strict=True))


@pytest.mark.parametrize("signer", SIGNERS)
def test_signed_deliveries_are_accepted_through_every_event_shape(
    signer: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape, b64 in SHAPE_VARIANTS:
        signed = SIGNERS[signer](harness.now)
        reply = harness.deliver(
            signed.provider, signed.body, signed.headers, shape=shape, base64_body=b64
        )
        assert (reply.status, reply.body) == (202, {"status": "accepted"}), (shape, b64)
        row = stored(conn, signed.provider, signed.event_id)
        assert row is not None
        assert bytes(row["body_sha256"]) == hashlib.sha256(signed.body).digest()
        assert row["enqueued_at"] is not None
        assert row["payload"] == json.loads(signed.body)
    messages = harness.queued()
    assert len(messages) == len(SHAPE_VARIANTS)
    assert all(set(m) == {"id"} and isinstance(m["id"], int) for m in messages)


def test_a_json_body_is_stored_as_sent_not_as_python_read_it(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    """Ingest stores the body's own text (jsonb keeps numbers as numeric): an amount with more
    digits than a float holds survives, as does a key given twice (jsonb keeps the last, like
    every JSON reader the handlers use). A re-serialised parse would store 1.2345678901234567e19."""
    event_id = f"evt_{_uid()}"
    body = (
        f'{{"id": "{event_id}", "type": "charge.succeeded", "amount": 12345678901234567890.125,'
        ' "note": "say \\"hi\\"", "note": "kept"}'
    ).encode()
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret_of("stripe"), timestamp=harness.now
    )
    reply = harness.deliver("stripe", body, {"Stripe-Signature": header})
    assert reply.status == 202
    amount, note = conn.execute(
        "SELECT payload->>'amount', payload->>'note' FROM webhook_events"
        " WHERE provider = 'stripe' AND event_id = %s",
        (event_id,),
    ).fetchone() or (None, None)
    assert (amount, note) == ("12345678901234567890.125", "kept")


def test_event_types_come_from_where_each_provider_puts_them(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    expected = {
        "stripe": "customer.created",
        "standardwebhooks": "invoice.paid",
        "slack_sdk": "app_mention",
        "github": "issues.opened",
        "shopify": "orders/create",
    }
    for signer, event_type in expected.items():
        signed = SIGNERS[signer](harness.now)
        assert harness.deliver(signed.provider, signed.body, signed.headers).status == 202
        row = stored(conn, signed.provider, signed.event_id)
        assert row is not None
        assert row["event_type"] == event_type, signer
    github = SIGNERS["github"](harness.now)
    harness.deliver(github.provider, github.body, github.headers)
    row = stored(conn, "github", github.event_id)
    assert row is not None
    assert row["delivery_id"] == github.headers["X-GitHub-Delivery"]


def _flip(text: str, index: int = -2) -> str:
    ch = text[index]
    # Change the value, not just the case: "a" -> "A" is the same hex digit.
    if ch in "0123456789abcdefABCDEF":
        replacement = "0" if ch != "0" else "1"
    else:
        replacement = "A" if ch != "A" else "B"
    return (
        text[:index] + replacement + text[index + 1 :] if index != -1 else text[:-1] + replacement
    )


def _mutations(signed: Signed) -> dict[str, Signed]:
    sig_name = next(k for k in signed.headers if "signature" in k.lower() or "hmac" in k.lower())
    body = bytearray(signed.body)
    body[len(body) // 2] ^= 0x01
    out = {
        "body": Signed(signed.provider, bytes(body), signed.headers, signed.event_id),
        "signature": Signed(
            signed.provider,
            signed.body,
            {**signed.headers, sig_name: _flip(signed.headers[sig_name], -5)},
            signed.event_id,
        ),
    }
    if signed.timestamp_header:
        ts = int(signed.headers[signed.timestamp_header])
        out["timestamp"] = Signed(
            signed.provider,
            signed.body,
            {**signed.headers, signed.timestamp_header: str(ts - 1)},
            signed.event_id,
        )
    if signed.id_header:
        out["id"] = Signed(
            signed.provider,
            signed.body,
            {**signed.headers, signed.id_header: _flip(signed.headers[signed.id_header], -1)},
            signed.event_id,
        )
    if signed.provider == "stripe":  # the timestamp lives inside Stripe-Signature
        header = signed.headers["Stripe-Signature"]
        ts = header.split(",")[0].removeprefix("t=")
        out["timestamp"] = Signed(
            signed.provider,
            signed.body,
            {"Stripe-Signature": header.replace(f"t={ts}", f"t={int(ts) - 1}")},
            signed.event_id,
        )
    return out


@pytest.mark.parametrize("signer", SIGNERS)
def test_one_flipped_byte_anywhere_is_401_and_no_row(
    signer: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    signed = SIGNERS[signer](harness.now)
    for what, mutated in _mutations(signed).items():
        for shape, b64 in (("v1", False), ("function-url", True)):
            reply = harness.deliver(
                mutated.provider, mutated.body, mutated.headers, shape=shape, base64_body=b64
            )
            assert (reply.status, reply.body) == (401, {"error": "unauthorized"}), what
    assert row_count(conn) == 0
    assert harness.queued() == []


def test_whitespace_changed_body_with_the_old_signature_is_401(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    signed = stripe_official(harness.now)
    reformatted = json.dumps(json.loads(signed.body), indent=2).encode()
    assert json.loads(reformatted) == json.loads(signed.body)
    assert harness.deliver("stripe", reformatted, signed.headers).status == 401
    assert harness.deliver("stripe", signed.body + b"\n", signed.headers).status == 401
    assert row_count(conn) == 0


def test_rotation_accepts_old_and_new_secrets_and_rejects_a_removed_one(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def deliver_signed_with(secret: str) -> int:
        body = json.dumps({"id": f"evt_{_uid()}", "type": "t"}).encode()
        header = stripe.WebhookSignature.generate_signature_header(
            body.decode(), secret, timestamp=harness.now
        )
        return harness.deliver("rotating", body, {"Stripe-Signature": header}).status

    new, old = ROTATING_SECRETS
    assert deliver_signed_with(new) == 202
    assert deliver_signed_with(old) == 202
    config = json.loads(harness_config_without(old))
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    harness.app.reset_clients()  # the deploy that drops a secret starts new execution environments
    assert deliver_signed_with(old) == 401
    assert deliver_signed_with(new) == 202
    assert row_count(conn) == 3


def harness_config_without(secret: str) -> str:
    from tests.integration.ingest.conftest import providers_config

    config = providers_config()
    rotating = config["providers"]["rotating"]
    rotating["secrets"] = [s for s in rotating["secrets"] if s["value"] != secret]
    return json.dumps(config)


@pytest.mark.parametrize("signer", ["stripe", "standardwebhooks", "slack_sdk", "hmac-sha256"])
@pytest.mark.parametrize(("offset", "status"), [(300, 202), (-300, 202), (301, 401), (-301, 401)])
def test_tolerance_boundary_plus_minus_one_second_both_directions(
    signer: str,
    offset: int,
    status: int,
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
) -> None:
    # Signed `offset` seconds away from the (frozen) clock: in the past (+) or the future (-).
    signed = SIGNERS[signer](harness.now - offset)
    reply = harness.deliver(signed.provider, signed.body, signed.headers)
    assert reply.status == status
    assert row_count(conn) == (1 if status == 202 else 0)


def test_known_answer_vectors_pass_verification_through_the_handler(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # DESIGN §5 vectors: authentic, but neither body is a storable event, so the handler answers
    # 400 (schema) — proving the signature check passed — and stores nothing.
    monkeypatch.setattr(ingest, "current_time", lambda: 1614265330.0)
    sw = harness.deliver(
        "kat-svix",
        b'{"test": 2432232314}',
        {
            "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
            "webhook-timestamp": "1614265330",
            "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        },
    )
    assert sw.status == 400
    gh = harness.deliver(
        "kat-github",
        b"Hello, World!",
        {
            "X-Hub-Signature-256": "sha256="
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        },
        shape="v1",
    )
    assert gh.status == 400
    assert row_count(conn) == 0
    assert KAT_SVIX_SECRET
    assert KAT_GITHUB_SECRET


BAD_BODIES: dict[str, tuple[bytes, int]] = {
    "array": (b'[{"id":"evt_1","type":"t"}]', 400),
    "number": (b"42", 400),
    "deeply nested": (b'{"id":"e","type":"t","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400),
    "10 KB id": (json.dumps({"id": "e" * 10_240, "type": "t"}).encode(), 400),
    "missing id": (b'{"type":"t"}', 400),
    "missing type": (b'{"id":"evt_1"}', 400),
    "empty id": (b'{"id":"","type":"t"}', 400),
    "NaN": (b'{"id":"evt_1","type":"t","v":NaN}', 400),
    "NUL escape": (b'{"id":"evt_1","type":"t","v":"a\\u0000b"}', 400),
    "lone surrogate": (b'{"id":"evt_1","type":"t","v":"\\ud800"}', 400),
    "huge number": (b'{"id":"evt_1","type":"t","v":1e999}', 400),
    "non-utf8 body": (b'{"id":"\xff\xfe","type":"t"}', 400),
    "too large": (json.dumps({"id": "e", "type": "t", "pad": "x" * 1024 * 1024}).encode(), 413),
}


@pytest.mark.parametrize("case", BAD_BODIES)
def test_bad_signed_bodies_are_4xx_never_5xx_never_a_row(
    case: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, expected = BAD_BODIES[case]
    headers = harness.sign("acme", body)
    for shape, b64 in SHAPE_VARIANTS:
        if case == "non-utf8 body" and not b64:
            continue  # API Gateway can only hand over non-UTF-8 bytes base64-encoded
        reply = harness.deliver("acme", body, headers, shape=shape, base64_body=b64)
        assert reply.status == expected, (shape, b64, reply.body)
    assert row_count(conn) == 0
    assert harness.queued() == []


BAD_REQUESTS: dict[str, tuple[dict[str, str], str, int]] = {
    "missing headers": ({}, "acme", 401),
    "garbage signature": ({"X-Acme-Signature": "sha256=" + "zz" * 32}, "acme", 401),
    "signature without prefix": ({"X-Acme-Signature": "00" * 32}, "acme", 401),
    "unknown provider": ({}, "nobody", 404),
    "provider outside the name pattern": ({}, "../etc", 404),
}


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_bad_requests_are_4xx_never_5xx_never_a_row(
    case: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    headers, provider, expected = BAD_REQUESTS[case]
    body = b'{"id":"evt_1","type":"t"}'
    for shape, b64 in SHAPE_VARIANTS:
        reply = harness.deliver(provider, body, headers, shape=shape, base64_body=b64)
        assert reply.status == expected, (shape, b64, reply.body)
    assert row_count(conn) == 0


def test_malformed_events_are_400(harness: IngestHarness, conn: psycopg.Connection[Any]) -> None:
    body = b'{"id":"evt_1","type":"t"}'
    bad_base64 = SHAPES["v2"]("acme", body, harness.sign("acme", body))
    bad_base64.update(isBase64Encoded=True, body="not*base64")
    assert harness.invoke(bad_base64).status == 400
    assert harness.invoke(["not", "an", "event"]).status == 400
    assert harness.invoke({"body": 42, "rawPath": "/webhooks/acme"}).status == 400
    assert row_count(conn) == 0


def test_a_bad_setting_is_a_500_for_the_delivery_not_a_crash(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_BODY_BYTES", "lots")
    body = b'{"id":"evt_setting","type":"t"}'
    reply = harness.deliver("acme", body, harness.sign("acme", body))
    assert (reply.status, reply.body) == (500, {"error": "internal error"})
    assert row_count(conn) == 0


def test_the_body_limit_is_configurable_and_checked_before_parsing(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MAX_BODY_BYTES", "64")
    small = b'{"id":"evt_small","type":"t"}'
    assert harness.deliver("acme", small, harness.sign("acme", small)).status == 202
    big = b'{"id":"evt_big","type":"t","pad":"' + b"x" * 64 + b'"}'
    for b64 in (False, True):
        reply = harness.deliver("acme", big, harness.sign("acme", big), base64_body=b64)
        assert (reply.status, reply.body) == (413, {"error": "payload too large"})
    # Not even JSON: the limit applies before any parsing or verification.
    assert harness.deliver("acme", b"x" * 65, {}).status == 413
    assert row_count(conn) == 1


def test_a_body_the_functions_memory_cannot_parse_is_a_413_that_names_the_memory(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At IngestMemorySize 128 a body of 1.5 MiB of small objects would peak above the memory
    (python -m bench.ingest_memory): refused with a line saying what to raise, never parsed."""
    monkeypatch.setenv("MAX_BODY_BYTES", str(4 * 1024 * 1024))
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
    items = ",".join('{"sku":"s","qty":1}' for _ in range(75_000))
    big = ('{"id":"evt_heavy","type":"t","items":[' + items + "]}").encode()
    assert 1024 * 1024 < len(big) < 4 * 1024 * 1024
    reply = harness.deliver("acme", big, harness.sign("acme", big))
    assert (reply.status, reply.body) == (413, {"error": "payload too large"})
    [line] = [r for r in caplog.records if r.getMessage() == "rejected"]
    assert "IngestMemorySize 128 MB" in line.__dict__["detail"]
    # The default MaxBodyBytes (1 MiB) fits the smallest memory the template allows.
    monkeypatch.setenv("MAX_BODY_BYTES", str(1024 * 1024))
    fits = ('{"id":"evt_fits","type":"t","items":[' + items[: 900 * 1024] + '{"qty":1}]}').encode()
    assert harness.deliver("acme", fits, harness.sign("acme", fits)).status == 202
    assert row_count(conn) == 1


def test_a_duplicate_delivered_sequentially_is_200_and_one_row_one_message(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    signed = stripe_official(harness.now)
    first = harness.deliver("stripe", signed.body, signed.headers, shape="v1")
    second = harness.deliver("stripe", signed.body, signed.headers, shape="v2", base64_body=True)
    assert (first.status, first.body) == (202, {"status": "accepted"})
    assert (second.status, second.body) == (200, {"status": "duplicate"})
    row = stored(conn, "stripe", signed.event_id)
    assert row is not None
    assert row["delivery_count"] == 2
    assert row_count(conn) == 1
    assert harness.queued() == [{"id": row["id"]}]


def test_github_redelivery_with_a_new_delivery_id_is_a_duplicate(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    # X-GitHub-Delivery is not signed: a replay can change it freely, so it cannot be the key.
    signed = github_documented(harness.now)
    assert harness.deliver("github", signed.body, signed.headers).status == 202
    replayed = {**signed.headers, "X-GitHub-Delivery": str(uuid.uuid4())}
    assert harness.deliver("github", signed.body, replayed).status == 200
    assert row_count(conn) == 1


def test_twenty_concurrent_deliveries_store_one_row_and_send_one_message(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    connection_per_thread: Callable[..., Any],
) -> None:
    # One connection per thread, as twenty Lambda execution environments would have.
    signed = svix_official(harness.now)
    event = SHAPES["v2"]("svix", signed.body, signed.headers)
    harness.app.sqs_client()  # create the client before the race, as a warm container would
    barrier = threading.Barrier(20)

    def deliver(_: int) -> int:
        connection_per_thread()
        barrier.wait(timeout=30)
        return harness.invoke(event).status

    with ThreadPoolExecutor(max_workers=20) as pool:
        statuses = list(pool.map(deliver, range(20)))
    assert sorted(statuses) == [200] * 19 + [202]
    row = stored(conn, "svix", signed.event_id)
    assert row is not None
    assert row["delivery_count"] == 20
    assert row_count(conn) == 1
    assert harness.queued() == [{"id": row["id"]}]


def test_database_unreachable_is_503_and_nothing_is_written(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://ingest@127.0.0.1:9/nowhere")
    monkeypatch.setenv("DB_CONNECT_TIMEOUT_S", "2")
    db.reset_for_tests()
    signed = stripe_official(harness.now)
    reply = harness.deliver("stripe", signed.body, signed.headers)
    assert reply.status == 503
    assert reply.raw["headers"]["Retry-After"]
    assert harness.queued() == []
    assert row_count(conn) == 0
    # Once the database is back, the provider's retry is accepted.
    monkeypatch.setenv("DATABASE_URL", database_url)
    db.reset_for_tests()  # the settings were read by the first delivery
    assert harness.deliver("stripe", signed.body, signed.headers).status == 202


def test_a_database_that_holds_the_connection_is_503_within_the_connect_timeout(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A paused Aurora Serverless v2 instance takes the connection and answers only once it
    has resumed (about 15 s): ingest must give up at its connect timeout (the template's 3 s),
    well inside its 8 s, answer 503 and store nothing; the provider's retry, once the database
    answers, is accepted. A listener that accepts and never speaks stands in for the resume."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # so that the thread sees `done` (closing does not wake accept)
    held: list[socket.socket] = []
    done = threading.Event()

    def hold() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                client, _ = listener.accept()
                held.append(client)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    monkeypatch.setenv("DATABASE_URL", f"postgresql://ingest@127.0.0.1:{port}/resuming")
    monkeypatch.setenv("DB_CONNECT_TIMEOUT_S", "3")
    db.reset_for_tests()
    signed = stripe_official(harness.now)
    try:
        started = time.monotonic()
        reply = harness.deliver("stripe", signed.body, signed.headers)
        elapsed = time.monotonic() - started
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()
        for client in held:
            client.close()
    assert held, "the delivery never reached the listener"
    assert reply.status == 503
    assert 3.0 <= elapsed < 8.0, elapsed  # the connect timeout, inside ingest's 8 s
    assert harness.queued() == []
    assert row_count(conn) == 0
    monkeypatch.setenv("DATABASE_URL", database_url)
    db.reset_for_tests()
    assert harness.deliver("stripe", signed.body, signed.headers).status == 202


def test_sqs_failure_after_commit_is_202_and_the_row_stays_not_enqueued(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCESSING_QUEUE_URL", harness.queue_url + "-missing")
    signed = stripe_official(harness.now)
    reply = harness.deliver("stripe", signed.body, signed.headers)
    assert (reply.status, reply.body) == (202, {"status": "accepted"})
    row = stored(conn, "stripe", signed.event_id)
    assert row is not None
    assert row["enqueued_at"] is None
    status = conn.execute(
        "SELECT status FROM webhook_events WHERE id = %s", (row["id"],)
    ).fetchone()
    assert status == ("received",)
    # Cleared, so the very next sweep sends it.
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=900) == [
        (row["id"], "received", False)
    ]


def test_sqs_and_database_failing_after_commit_is_202_and_the_stale_rule_recovers_the_row(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCESSING_QUEUE_URL", harness.queue_url + "-missing")

    def database_gone(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("OperationalError")

    monkeypatch.setattr(inbox, "clear_enqueued", database_gone)
    signed = stripe_official(harness.now)
    reply = harness.deliver("stripe", signed.body, signed.headers)
    assert (reply.status, reply.body) == (202, {"status": "accepted"})
    row = stored(conn, "stripe", signed.event_id)
    assert row is not None
    assert row["enqueued_at"] is not None  # the stamp stayed: not due until it is stale
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=900) == []
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = now() - interval '16 minutes',"
        " available_at = now() - interval '16 minutes' WHERE id = %s",
        (row["id"],),
    )
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=900) == [
        (row["id"], "received", True)
    ]


def test_slack_url_verification_is_answered_and_not_stored(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    body = json.dumps({"token": "t", "challenge": challenge, "type": "url_verification"}).encode()
    reply = harness.deliver("slack", body, harness.sign("slack", body))
    assert reply.status == 200
    assert reply.body == {"challenge": challenge}
    assert harness.deliver("slack", body, {}).status == 401
    assert row_count(conn) == 0


@pytest.mark.parametrize("fixture", FIXTURES)
def test_shipped_event_fixtures_are_accepted(
    fixture: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    reply = harness.invoke(load_event(fixture))
    assert reply.status == 202
    assert harness.invoke(load_event(fixture)).status == 200
    assert row_count(conn) == 1


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/webhooks/stripe", 405),  # a GET that is no challenge of Stripe's
        ("PUT", "/webhooks/stripe", 401),
        ("POST", "/", 404),
        ("POST", "/admin", 404),
        ("POST", "/webhooks/stripe/extra", 404),
        ("GET", "/webhooks/nobody", 404),
    ],
)
def test_a_function_url_hands_ingest_every_method_and_path_and_stores_nothing_unsigned(
    method: str, path: str, status: int, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    """Endpoint=FunctionUrl has no route: whatever reaches the URL reaches ingest, which must
    answer as the HTTP API's route and ingest together do."""
    signed = stripe_official(harness.now)
    event = SHAPES["function-url"](signed.provider, signed.body, {})
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    assert harness.invoke(event).status == status
    assert row_count(conn) == 0
