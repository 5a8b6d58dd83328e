"""Signatures inside the body and challenge handshakes through the ingest handler (real
PostgreSQL, moto SQS), every event shape: an authentic sample is stored once (one row per event
it carries) and answered as its sender wants, its redelivery is a duplicate; each handshake is
answered (method, query string, headers as the sender sends them) and stores nothing; forged,
oversized and signed non-event deliveries store nothing."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import parse_qsl, urlencode

import psycopg
import pytest

from tests.ingest_support import SHAPES
from tests.integration.ingest.conftest import IngestHarness, providers_config, row_count
from tests.integration.ingest.senders import SHAPE_VARIANTS, events
from tests.support import FakeLambdaContext
from webhook_inbox.ingest import providers
from webhook_inbox_tools import sample_events

NEW = ["adyen", "braintree", "meta", "whatsapp", "x", "dropbox", "asana", "xero",
       "microsoft-graph", "okta"]  # fmt: skip
# What each answers a new event with (the rest: ingest's 202 and its JSON).
ANSWERS = {
    "adyen": (200, "[accepted]"),
    "xero": (200, ""),
    **dict.fromkeys(("meta", "whatsapp", "x", "dropbox", "asana", "okta"),
                    (200, '{"status":"accepted"}')),
}  # fmt: skip
META_TOKEN = "dev-only-meta-verify-token"  # events/providers.local.json


def call(
    harness: IngestHarness,
    provider: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    query: str = "",
    shape: str = "v2",
    base64_body: bool = False,
) -> dict[str, Any]:
    event = SHAPES[shape](
        provider, body, headers or {}, base64_body=base64_body, query=query, method=method
    )
    reply: dict[str, Any] = harness.app.handler(event, FakeLambdaContext())
    return reply


def delivery(harness: IngestHarness, name: str, body: bytes | None = None) -> tuple[bytes, dict]:
    """A sample of the provider's default type (or ``body``) as its sender would post it."""
    provider = providers.registry()[name]
    catalog = sample_events.catalog(name)
    assert catalog is not None
    built = sample_events.build(provider, catalog.default, now=harness.now)
    signed = providers.sign_delivery(
        provider, built.body if body is None else body, timestamp=harness.now
    )
    return signed.body, signed.headers


@pytest.mark.parametrize("name", NEW)
def test_an_authentic_sample_is_stored_once_and_its_redelivery_is_a_duplicate(
    name: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    status, text = ANSWERS.get(name, (202, '{"status":"accepted"}'))
    duplicate = "" if name == "xero" else "[accepted]" if name == "adyen" else None
    for shape, b64 in SHAPE_VARIANTS:
        body, headers = delivery(harness, name)
        first = call(harness, name, body, headers, shape=shape, base64_body=b64)
        assert (first["statusCode"], first["body"]) == (status, text), shape
        again = call(harness, name, body, headers, shape=shape, base64_body=b64)
        expected = '{"status":"duplicate"}' if duplicate is None else duplicate
        assert (again["statusCode"], again["body"]) == (200, expected)
    stored = events(conn, name)
    assert len(stored) == len(SHAPE_VARIANTS)  # each sample carries one event
    assert {row["delivery_count"] for row in stored} == {2}
    assert len(harness.queued()) == len(SHAPE_VARIANTS)
    # Nothing the sender authenticated with is stored with the event.
    secret = providers_config()["providers"][name]["secrets"][0]["value"]
    assert all(secret not in json.dumps(row["payload"]) for row in stored)


def tampered(name: str, body: bytes, headers: dict[str, str]) -> tuple[bytes, dict[str, str]]:
    """The delivery with what authenticates it broken by one character."""
    if name == "adyen":
        document = json.loads(body)
        document["notificationItems"][0]["NotificationRequestItem"]["amount"]["value"] += 1
        return json.dumps(document).encode(), headers
    if name == "braintree":
        fields = dict(parse_qsl(body.decode()))
        fields["bt_signature"] = fields["bt_signature"][:-1] + "0"
        if fields["bt_signature"] == dict(parse_qsl(body.decode()))["bt_signature"]:
            fields["bt_signature"] = fields["bt_signature"][:-1] + "1"
        return urlencode(fields).encode(), headers
    if name == "microsoft-graph":
        return body.replace(b'"clientState":"', b'"clientState":"x'), headers
    if name == "okta":
        return body, {k: v + "x" for k, v in headers.items()}
    return body.replace(b"{", b"[", 1), headers


@pytest.mark.parametrize("name", NEW)
def test_a_forged_an_oversized_or_a_signed_non_event_delivery_stores_nothing(
    name: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    body, headers = tampered(name, *delivery(harness, name))
    refused = call(harness, name, body, headers)
    assert refused["statusCode"] == 401
    assert refused["body"] == ("" if name == "xero" else '{"error":"unauthorized"}')
    oversized = json.dumps({"pad": "x" * (1024 * 1024)}).encode()
    assert call(harness, name, *delivery(harness, name, oversized))["statusCode"] == 413
    for odd in (b"[]", b"not json", b'{"a": NaN}', b'{"unrelated": true}',
                b'{"events": [{"x": 1}]}', b'{"value": [{"a": 1}]}'):  # fmt: skip
        body, headers = delivery(harness, name, odd)
        assert call(harness, name, body, headers)["statusCode"] in (400, 401), (name, odd)
    assert row_count(conn) == 0
    assert harness.queued() == []


def meta_query(token: str = META_TOKEN) -> str:
    return urlencode({"hub.mode": "subscribe", "hub.challenge": "1158201444",
                      "hub.verify_token": token})  # fmt: skip


# name -> (method, query, headers, expected status, body, extra response headers)
HANDSHAKES: dict[str, tuple[str, str, dict[str, str], int, str, dict[str, str]]] = {
    "meta": ("GET", meta_query(), {}, 200, "1158201444", {"X-Content-Type-Options": "nosniff"}),
    "dropbox": ("GET", "challenge=abc123", {}, 200, "abc123",
                {"X-Content-Type-Options": "nosniff"}),
    "microsoft-graph": ("POST", urlencode({"validationToken": "Validation: token 1"}), {}, 200,
                        "Validation: token 1", {"Content-Type": "text/plain"}),
    "okta": ("GET", "", {"X-Okta-Verification-Challenge": "okta-challenge-1",
                         "Authorization": "Bearer dev-only-okta-hook-secret-NOT-FOR-PRODUCTION"},
             200, '{"verification":"okta-challenge-1"}', {}),
    "asana": ("POST", "", {"X-Hook-Secret": "dev-only-asana-hook-secret-NOT-FOR-PRODUCTION"},
              200, "", {"X-Hook-Secret": "dev-only-asana-hook-secret-NOT-FOR-PRODUCTION"}),
}  # fmt: skip


@pytest.mark.parametrize("name", [*HANDSHAKES, "x", "braintree"])
def test_each_handshake_is_answered_in_every_shape_and_stores_nothing(
    name: str, harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    for shape in SHAPES:
        if name == "x":
            reply = call(harness, name, method="GET", query="crc_token=Y3JjLXRva2Vu", shape=shape)
            assert json.loads(reply["body"])["response_token"].startswith("sha256=")
        elif name == "braintree":
            reply = call(harness, name, method="GET", query="bt_challenge=" + "ab" * 10,
                         shape=shape)  # fmt: skip
            assert reply["body"].startswith("devonlypublickey|")
        else:
            method, query, headers, status, body, extra = HANDSHAKES[name]
            reply = call(harness, name, method=method, query=query, headers=headers, shape=shape)
            assert (reply["statusCode"], reply["body"]) == (status, body), shape
            assert extra.items() <= reply["headers"].items()
        assert reply["statusCode"] == 200
    assert row_count(conn) == 0
    assert harness.queued() == []


@pytest.mark.parametrize(
    ("name", "method", "query", "headers", "status"),
    [
        ("meta", "GET", meta_query("wrong"), {}, 401),
        (
            "okta",
            "GET",
            "",
            {"X-Okta-Verification-Challenge": "c", "Authorization": "Bearer no"},
            401,
        ),
        ("asana", "POST", "", {"X-Hook-Secret": "chosen-by-a-stranger"}, 401),
        ("dropbox", "GET", "", {}, 405),  # no challenge: a GET that is nothing
        ("stripe", "GET", "challenge=abc", {}, 405),  # a sender without handshakes
    ],
)
def test_a_handshake_that_is_not_allowed_is_refused(
    name: str, method: str, query: str, headers: dict[str, str], status: int, *,
    harness: IngestHarness, conn: psycopg.Connection[Any],
) -> None:  # fmt: skip
    reply = call(harness, name, method=method, query=query, headers=headers)
    body = {401: '{"error":"unauthorized"}', 405: '{"error":"method not allowed"}'}[status]
    assert (reply["statusCode"], reply["body"]) == (status, body)
    assert "X-Hook-Secret" not in reply["headers"]
    assert row_count(conn) == 0


def test_xeros_intent_to_receive_is_200_signed_401_not_both_without_a_body(
    harness: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    intent = b'{"events":[],"lastEventSequence":0,"firstEventSequence":0,"entropy":"S0m3r4N"}'
    body, headers = delivery(harness, "xero", intent)
    good = call(harness, "xero", body, headers)
    signature = headers["x-xero-signature"]
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]
    bad = call(harness, "xero", body, {"x-xero-signature": flipped})
    assert [(r["statusCode"], r["body"]) for r in (good, bad)] == [(200, ""), (401, "")]
    assert row_count(conn) == 0


def test_asana_with_accept_handshake_stores_the_handshake_for_the_operator(
    harness: IngestHarness, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = providers_config()
    config["providers"]["asana-new"] = {
        "scheme": "asana",
        "secrets": [{"value": "placeholder-until-the-handshake"}],
        "options": {"accept_handshake": True},
    }
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    harness.app.reset_clients()
    headers = {"X-Hook-Secret": "secret-asana-generated"}
    for _ in range(2):
        reply = call(harness, "asana-new", headers=headers)
        assert reply["statusCode"] == 200
        assert reply["headers"]["X-Hook-Secret"] == "secret-asana-generated"
    (row,) = events(conn, "asana-new")
    assert row["event_type"] == "handshake"
    assert row["payload"] == {"x_hook_secret": "secret-asana-generated"}
    assert row["delivery_count"] == 2


def get(base: str, path: str) -> tuple[int, dict[str, str], bytes]:
    host, _, port = base.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_webhook_inbox_devs_gateway_answers_the_get_challenges_as_the_http_api_does(
    dev_gateway: str, conn: psycopg.Connection[Any]
) -> None:
    """`webhook-inbox dev` routes GET /webhooks/{provider} as the deployed HTTP API does: a
    challenge is answered with its headers, any other GET is a 401, 405 or 404."""
    status, headers, body = get(dev_gateway, f"/webhooks/meta?{meta_query()}")
    assert (status, body, headers["X-Content-Type-Options"]) == (200, b"1158201444", "nosniff")
    status, _, body = get(dev_gateway, "/webhooks/x?crc_token=abc")
    assert json.loads(body)["response_token"].startswith("sha256=")
    assert get(dev_gateway, "/webhooks/meta?hub.mode=subscribe")[0] == 401
    assert get(dev_gateway, "/webhooks/stripe")[0] == 405
    assert get(dev_gateway, "/elsewhere")[0] == 404
    assert row_count(conn) == 0
