"""Twilio, Square and HubSpot (they sign the URL they call) and Paddle through the real ingest
handler: REST v1, HTTP API v2 and Function URL events as API Gateway builds them, with and
without ``public_url``, with a query string; a flipped byte anywhere signed is a 401 and no row;
duplicates; a HubSpot batch that is partly known."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
import pytest

from tests.ingest_support import SHAPES, rebuilt_url, signed_event
from tests.integration.ingest.conftest import IngestHarness, Reply, providers_config, row_count
from webhook_inbox.ingest import providers

TWIML = "<Response/>"
CUSTOM_DOMAIN = "https://hooks.example.com/base/webhooks"
# A query string REST API re-encoding cannot reproduce (%20 comes back as +).
REGISTERED_QUERY = "tenant=acme&label=x%20y"


def twilio_form(n: int = 1) -> bytes:
    return urlencode(
        {
            "MessageSid": f"SM{n:032d}",
            "SmsSid": f"SM{n:032d}",
            "MessageStatus": "delivered",
            "SmsStatus": "delivered",
            "AccountSid": "AC" + "0" * 32,
            "From": "+15005550006",
            "To": "+15005550001",
            "Body": "a body & an = sign",
        }
    ).encode()


def square_body(n: int = 1) -> bytes:
    return json.dumps(
        {
            "merchant_id": "MLDEV",
            "type": "payment.created",
            "event_id": f"sq-evt-{n}",
            "created_at": "2026-01-01T00:00:00Z",
            "data": {"type": "payment", "id": f"pay-{n}"},
        }
    ).encode()


def hubspot_event(n: int, attempt: int = 0, kind: str = "contact.creation") -> dict[str, Any]:
    return {
        "eventId": n,
        "subscriptionId": 9,
        "portalId": 62515,
        "appId": 54321,
        "occurredAt": 1_700_000_000_000 + n,
        "subscriptionType": kind,
        "attemptNumber": attempt,
        "objectId": 100 + n,
        "changeSource": "CRM",
    }


def hubspot_body(*events: dict[str, Any]) -> bytes:
    return json.dumps(list(events) or [hubspot_event(1), hubspot_event(2)]).encode()


# kind -> (sample provider, body, expected types, whether HTTP APIs base64-encode the body)
KINDS: dict[str, tuple[str, Callable[[], bytes], list[str], bool]] = {
    "twilio-form": ("twilio", twilio_form, ["message.delivered"], True),
    "twilio-json": (
        "twilio",
        lambda: b'{"type":"studio.flow","flow":"FW1"}',
        ["studio.flow"],
        False,
    ),
    "square": ("square", square_body, ["payment.created"], False),
    "hubspot": ("hubspot", hubspot_body, ["contact.creation", "contact.creation"], False),
}
MODES = ["rebuilt", "rebuilt-query", "public-url", "public-url-query"]


@pytest.fixture
def configured(harness: IngestHarness, monkeypatch: pytest.MonkeyPatch) -> IngestHarness:
    """The sample providers plus, for each URL-signed one, a copy behind a custom domain
    (``NAME-public``) and one registered with a query string (``NAME-public-query``)."""
    config = providers_config()
    for name in ("twilio", "square", "hubspot"):
        base = config["providers"][name]
        config["providers"][f"{name}-public"] = {
            **base,
            "public_url": f"{CUSTOM_DOMAIN}/{name}-public",
        }
        config["providers"][f"{name}-public-query"] = {
            **base,
            "public_url": f"{CUSTOM_DOMAIN}/{name}-public-query?{REGISTERED_QUERY}",
        }
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    providers.reset_for_tests()
    return harness


def setup(mode: str, name: str) -> tuple[providers.Provider, str]:
    """The provider for ``mode`` and the query string of the request the sender makes."""
    registry = providers.registry()
    if mode == "rebuilt":
        return registry[name], ""
    if mode == "rebuilt-query":
        return registry[name], "tenant=acme&region=eu-west-1&empty="
    if mode == "public-url":
        return registry[f"{name}-public"], ""
    return registry[f"{name}-public-query"], REGISTERED_QUERY


def rows(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int]]:
    found = conn.execute(
        "SELECT provider, event_type, delivery_count FROM webhook_events ORDER BY id"
    ).fetchall()
    return [(r[0], r[1], r[2]) for r in found]


def assert_accepted(reply: Reply, kind: str) -> None:
    if kind == "twilio-form":
        assert (reply.status, reply.body) == (200, TWIML), reply
        assert reply.raw["headers"]["Content-Type"] == "text/xml"
    else:
        assert (reply.status, reply.body) == (202, {"status": "accepted"}), reply


def _flip(url: str, at: int) -> str:
    return url[:at] + chr(ord(url[at]) ^ 1) + url[at + 1 :]


def _replace_headers(event: dict[str, Any], new: dict[str, str]) -> None:
    """Replace headers in an event of any shape, whatever case it holds them in."""
    for field in ("headers", "multiValueHeaders"):
        held = event.get(field)
        if not isinstance(held, dict):
            continue
        for name, value in new.items():
            key = next((k for k in held if k.lower() == name.lower()), name.lower())
            held[key] = [value] if field == "multiValueHeaders" else value


def _event(kind: str, shape: str, provider: providers.Provider, query: str, **signing: Any) -> Any:
    _, body_of, _, binary = KINDS[kind]
    return signed_event(
        shape, provider, body_of(), query=query, base64_body=binary and shape != "v1", **signing
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_url_signed_delivery_verifies_over_the_called_url_from_every_event_shape(
    configured: IngestHarness, conn: psycopg.Connection[Any], kind: str, shape: str, mode: str
) -> None:
    provider, query = setup(mode, KINDS[kind][0])
    types = KINDS[kind][2]
    event = _event(kind, shape, provider, query, timestamp=configured.now, event_id="token-1")

    # Signed for a URL one byte off what ingest verifies over (the host; the path or query).
    verified_over = provider.public_url or rebuilt_url(shape, provider.name, query)
    for at in (len("https://") + 1, len(verified_over) - 1):
        forged = json.loads(json.dumps(event))
        wrong = provider.scheme.sign(
            provider.secrets()[0],
            KINDS[kind][1](),
            timestamp=configured.now,
            url=_flip(verified_over, at),
        )
        _replace_headers(forged, wrong.headers)
        reply = configured.invoke(forged)
        assert (reply.status, reply.body) == (401, {"error": "unauthorized"})
    assert row_count(conn) == 0

    assert_accepted(configured.invoke(event), kind)
    assert rows(conn) == [(provider.name, t, 1) for t in types]
    assert len(configured.queued()) == len(types)

    again = configured.invoke(event)
    if kind == "twilio-form":
        assert (again.status, again.body) == (200, TWIML)
    else:
        assert (again.status, again.body) == (200, {"status": "duplicate"})
    assert rows(conn) == [(provider.name, t, 2) for t in types]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_behind_a_custom_domain_without_public_url_nothing_verifies(
    configured: IngestHarness, conn: psycopg.Connection[Any], kind: str
) -> None:
    """What public_url is for: the sender called the custom domain, the event names another."""
    name, body_of, _, binary = KINDS[kind]
    public = providers.registry()[f"{name}-public"]
    signed = public.scheme.sign(
        public.secrets()[0], body_of(), timestamp=configured.now, url=public.public_url or ""
    )
    event = SHAPES["v2"](
        name, signed.body, signed.headers, query=urlsplit(signed.url).query, base64_body=binary
    )
    assert configured.invoke(event).status == 401
    assert row_count(conn) == 0


@pytest.mark.parametrize(("shape", "status"), [("v1", 401), ("v2", 202), ("function-url", 202)])
def test_a_query_string_rest_events_cannot_rebuild_needs_public_url(
    configured: IngestHarness, conn: psycopg.Connection[Any], shape: str, status: int
) -> None:
    """Square signs the URL as called (``label=x%20y``); a REST event only has ``label=x y``,
    which ingest re-encodes as ``x+y``. HTTP APIs and Function URLs pass the raw query. (The
    ``public-url-query`` mode above is the fix: the query string as registered, in public_url.)"""
    square = providers.registry()["square"]
    called = rebuilt_url(shape, "square") + "?" + REGISTERED_QUERY
    signed = square.scheme.sign(
        square.secrets()[0], square_body(), timestamp=configured.now, url=called
    )
    event = SHAPES[shape]("square", signed.body, signed.headers, query=REGISTERED_QUERY)
    assert configured.invoke(event).status == status
    assert row_count(conn) == (0 if status == 401 else 1)


# --- a flipped byte elsewhere, the window, the key -------------------------------------------


SIGNATURE_HEADERS = {
    "twilio-form": "x-twilio-signature",
    "twilio-json": "x-twilio-signature",
    "square": "x-square-hmacsha256-signature",
    "hubspot": "x-hubspot-signature-v3",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("what", ["body", "signature", "query", "key"])
def test_one_flipped_byte_in_what_is_signed_is_a_401_and_no_row(
    configured: IngestHarness, conn: psycopg.Connection[Any], kind: str, what: str
) -> None:
    provider = providers.registry()[KINDS[kind][0]]
    if what == "key":
        secret = provider.secrets()[0]
        flipped = providers.SecretRef("value", secret[:-1] + chr(ord(secret[-1]) ^ 1))
        provider = dataclasses.replace(provider, secret_refs=(flipped,))
    event = _event(kind, "v2", provider, "", timestamp=configured.now)
    if what == "body":
        encoded = event["isBase64Encoded"]
        raw = bytearray(base64.b64decode(event["body"]) if encoded else event["body"].encode())
        raw[len(raw) // 2] ^= 1
        event["body"] = base64.b64encode(raw).decode() if encoded else raw.decode()
    elif what == "signature":
        value = event["headers"][SIGNATURE_HEADERS[kind]]
        event["headers"][SIGNATURE_HEADERS[kind]] = ("B" if value[0] == "A" else "A") + value[1:]
    elif what == "query":  # the URL signed: a parameter added to it
        event["rawQueryString"] = "&".join(filter(None, [event["rawQueryString"], "x=1"]))
    reply = configured.invoke(event)
    assert (reply.status, reply.body) == (401, {"error": "unauthorized"})
    assert row_count(conn) == 0


@pytest.mark.parametrize("skew", [-301, 301])
def test_hubspot_outside_its_five_minutes_either_way_is_a_401(
    configured: IngestHarness, conn: psycopg.Connection[Any], skew: int
) -> None:
    hubspot = providers.registry()["hubspot"]
    for ok in (skew - (1 if skew > 0 else -1), skew):
        event = signed_event("v2", hubspot, hubspot_body(), timestamp=configured.now + ok)
        expected = 202 if abs(ok) <= 300 else 401
        assert configured.invoke(event).status == expected
    assert row_count(conn) == 2  # the two events of the delivery inside the window


def test_hubspot_batch_partly_known_stores_only_its_new_events(
    configured: IngestHarness, conn: psycopg.Connection[Any]
) -> None:
    hubspot = providers.registry()["hubspot"]
    first = signed_event(
        "v2", hubspot, hubspot_body(hubspot_event(1), hubspot_event(2)), timestamp=configured.now
    )
    assert configured.invoke(first).status == 202
    # HubSpot's retry bumps attemptNumber; the same eventId under another type is another event.
    retry = hubspot_body(
        hubspot_event(1, attempt=1),
        hubspot_event(2, attempt=1),
        hubspot_event(2, kind="contact.deletion"),
    )
    reply = configured.invoke(signed_event("v2", hubspot, retry, timestamp=configured.now + 60))
    assert (reply.status, reply.body) == (202, {"status": "accepted"})
    assert rows(conn) == [
        ("hubspot", "contact.creation", 2),
        ("hubspot", "contact.creation", 2),
        ("hubspot", "contact.deletion", 1),
    ]
    assert len(configured.queued()) == 3
    again = configured.invoke(signed_event("v2", hubspot, retry, timestamp=configured.now + 120))
    assert (again.status, again.body) == (200, {"status": "duplicate"})
    assert row_count(conn) == 3


# --- Paddle ----------------------------------------------------------------------------------


def paddle_body(n: int = 1) -> bytes:
    return json.dumps(
        {
            "event_id": f"evt_{n:026d}",
            "event_type": "transaction.paid",
            "occurred_at": "2026-01-01T00:00:00.000000Z",
            "notification_id": f"ntf_{n:026d}",
            "data": {"id": f"txn_{n}"},
        }
    ).encode()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_paddle_is_answered_200_and_keyed_by_its_signed_event_id(
    configured: IngestHarness, conn: psycopg.Connection[Any], shape: str
) -> None:
    paddle = providers.registry()["paddle"]
    event = signed_event(shape, paddle, paddle_body(), timestamp=configured.now)
    first = configured.invoke(event)
    assert (first.status, first.body) == (200, {"status": "accepted"})
    again = configured.invoke(event)
    assert (again.status, again.body) == (200, {"status": "duplicate"})
    stored = conn.execute(
        "SELECT event_id, event_type, delivery_id, delivery_count FROM webhook_events"
    ).fetchall()
    assert stored == [(f"evt_{1:026d}", "transaction.paid", f"ntf_{1:026d}", 2)]


@pytest.mark.parametrize("what", ["body", "signature", "timestamp", "stale", "future"])
def test_paddle_tampered_or_outside_the_window_is_a_401_and_no_row(
    configured: IngestHarness, conn: psycopg.Connection[Any], what: str
) -> None:
    paddle = providers.registry()["paddle"]
    tolerance = paddle.tolerance_seconds
    skew = {"stale": -tolerance - 1, "future": tolerance + 1}.get(what, 0)
    event = signed_event("v2", paddle, paddle_body(), timestamp=configured.now + skew)
    header = event["headers"]["paddle-signature"]
    if what == "body":
        event["body"] = event["body"].replace("txn_1", "txn_2")
    elif what == "signature":
        event["headers"]["paddle-signature"] = header[:-1] + ("0" if header[-1] != "0" else "1")
    elif what == "timestamp":
        ts = int(header.split(";")[0][3:])
        event["headers"]["paddle-signature"] = header.replace(f"ts={ts}", f"ts={ts + 1}")
    reply = configured.invoke(event)
    assert (reply.status, reply.body) == (401, {"error": "unauthorized"})
    assert row_count(conn) == 0


# --- Twilio: what its signature cannot tell apart is one event ----------------------------


def _regrouped_in_the_form(form: dict[str, str], query: str) -> tuple[dict[str, str], str]:
    # "AccountSid" + value is the same signed text as "AccountSi" + "d" + value; "AccountSi"
    # still sorts where "AccountSid" did, so the concatenation Twilio signs is unchanged.
    regrouped = {k: v for k, v in form.items() if k != "AccountSid"}
    regrouped["AccountSi"] = "d" + form["AccountSid"]
    return regrouped, query


def _merged_into_the_previous_value(form: dict[str, str], query: str) -> tuple[dict[str, str], str]:
    # "Body" + body + "From" + from: the "From" parameter folded into Body's value.
    regrouped = {k: v for k, v in form.items() if k != "From"}
    regrouped["Body"] = form["Body"] + "From" + form["From"]
    return regrouped, query


def _moved_into_the_query(form: dict[str, str], query: str) -> tuple[dict[str, str], str]:
    # The URL is signed verbatim and the parameters follow it: the first parameter ("AccountSid"
    # sorts first) can become the tail of the query string's last value.
    regrouped = {k: v for k, v in form.items() if k != "AccountSid"}
    return regrouped, query + "AccountSid" + form["AccountSid"]


REGROUPINGS = {
    "name/value boundary moved": _regrouped_in_the_form,
    "a parameter folded into a value": _merged_into_the_previous_value,
    "a parameter moved into the query string": _moved_into_the_query,
}


@pytest.mark.parametrize("regroup", sorted(REGROUPINGS))
def test_twilio_a_captured_form_regrouped_under_the_same_signature_is_a_duplicate(
    configured: IngestHarness, conn: psycopg.Connection[Any], regroup: str
) -> None:
    """Twilio signs the URL followed by names and values with no separator, so regrouping the
    same characters into other parameters keeps a captured signature valid. The event must not
    come back as a new one: the key is what the signature covers, not how it is grouped."""
    twilio = providers.registry()["twilio"]
    query = "tenant=acme"
    captured = signed_event("v2", twilio, twilio_form(), query=query, base64_body=True)
    assert configured.invoke(captured).status == 200
    assert rows(conn) == [("twilio", "message.delivered", 1)]

    form = dict(parse_qsl(twilio_form().decode(), keep_blank_values=True))
    regrouped, forged_query = REGROUPINGS[regroup](form, query)
    forged = json.loads(json.dumps(captured))
    forged["body"] = base64.b64encode(urlencode(regrouped).encode()).decode()
    forged["rawQueryString"] = forged_query
    reply = configured.invoke(forged)

    assert (reply.status, reply.body) == (200, TWIML)  # it verifies: Twilio cannot tell them apart
    assert rows(conn) == [("twilio", "message.delivered", 2)]
