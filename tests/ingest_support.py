"""Builders for the three HTTP event shapes the ingest function accepts, and the sample config.

``python -m tests.ingest_support`` rewrites the signed fixtures in events/ from
events/providers.local.json (the sample provider ``acme`` signs without a timestamp, so the
fixtures stay valid for `sam local invoke`).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.support import EVENTS_DIR

if TYPE_CHECKING:
    from webhook_inbox.ingest.providers import Provider

SAMPLE_CONFIG_PATH = EVENTS_DIR / "providers.local.json"


def sample_config_text() -> str:
    return SAMPLE_CONFIG_PATH.read_text()


def _body_field(body: bytes, base64_body: bool) -> str:
    return base64.b64encode(body).decode() if base64_body else body.decode("utf-8")


def _decoded_query(query: str) -> dict[str, list[str]]:
    return parse_qs(query, keep_blank_values=True)


def v1_event(
    provider: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    base64_body: bool = False,
    query: str = "",
    method: str = "POST",
) -> dict[str, Any]:
    """API Gateway REST API proxy integration (payload 1.0): header case as sent, the stage in
    ``requestContext.path``, the query string only as decoded parameters (``query`` is the raw
    query string the sender used)."""
    multi = _decoded_query(query)
    return {
        "resource": "/webhooks/{provider}",
        "path": f"/webhooks/{provider}",
        "httpMethod": method,
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in multi.items()} or None,
        "multiValueQueryStringParameters": multi or None,
        "pathParameters": {"provider": provider},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/webhooks/{provider}",
            "httpMethod": method,
            "path": f"/prod/webhooks/{provider}",
            "stage": "prod",
            "domainName": "r1.execute-api.us-east-1.amazonaws.com",
            "requestId": str(uuid.uuid4()),
            "identity": {"sourceIp": "203.0.113.10", "userAgent": "sender/1.0"},
        },
        "body": _body_field(body, base64_body),
        "isBase64Encoded": base64_body,
    }


def v2_event(
    provider: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    base64_body: bool = False,
    query: str = "",
    method: str = "POST",
) -> dict[str, Any]:
    """HTTP API (payload 2.0): header names lower-cased by API Gateway, the raw query string
    as sent (and decoded, comma-joined parameters beside it)."""
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": f"{method} /webhooks/{{provider}}",
        "rawPath": f"/webhooks/{provider}",
        "rawQueryString": query,
        "headers": {k.lower(): v for k, v in headers.items()},
        "requestContext": {
            "apiId": "abc123",
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
            "http": {
                "method": method,
                "path": f"/webhooks/{provider}",
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.10",
                "userAgent": "sender/1.0",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"{method} /webhooks/{{provider}}",
            "stage": "$default",
        },
        "pathParameters": {"provider": provider},
        "body": _body_field(body, base64_body),
        "isBase64Encoded": base64_body,
    }
    if query:
        event["queryStringParameters"] = {k: ",".join(v) for k, v in _decoded_query(query).items()}
    return event


def function_url_event(
    provider: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    base64_body: bool = False,
    query: str = "",
    method: str = "POST",
) -> dict[str, Any]:
    """Lambda Function URL (payload 2.0 shape, no route, no path parameters)."""
    event = v2_event(provider, body, headers, base64_body=base64_body, query=query, method=method)
    event["routeKey"] = "$default"
    event.pop("pathParameters")
    event["requestContext"]["routeKey"] = "$default"
    event["requestContext"]["domainName"] = "abcdefg.lambda-url.us-east-1.on.aws"
    return event


SHAPES: dict[str, Callable[..., dict[str, Any]]] = {
    "v1": v1_event,
    "v2": v2_event,
    "function-url": function_url_event,
}


def rebuilt_url(shape: str, provider: str, query: str = "") -> str:
    """The URL ingest rebuilds from an event of ``shape``: what a URL-signed sender must have
    called for its signature to verify without ``public_url``."""
    from webhook_inbox.ingest import pipeline as ingest

    return ingest.decode_event(SHAPES[shape](provider, b"", {}, query=query), 1)[1].url


def signed_event(
    shape: str,
    provider: Provider,
    body: bytes,
    *,
    query: str = "",
    base64_body: bool = False,
    **signing: Any,
) -> dict[str, Any]:
    """An event of ``shape`` carrying ``body`` as ``provider`` sends it to the URL that event
    rebuilds to (``public_url`` instead, when the provider has one), with the query string of
    the URL it signed (Twilio adds ``bodySHA256`` to it)."""
    from webhook_inbox.ingest.providers import sign_delivery

    url = rebuilt_url(shape, provider.name, query)
    signed = sign_delivery(provider, body, url=url, **signing)
    sent = urlsplit(signed.url).query
    return SHAPES[shape](
        provider.name, signed.body, signed.headers, base64_body=base64_body, query=sent
    )


FIXTURES = {
    "apigw-v1-post.json": ("v1", "evt_fixture_v1"),
    "apigw-v2-post.json": ("v2", "evt_fixture_v2"),
    "function-url-post.json": ("function-url", "evt_fixture_url"),
}


def fixture_body(event_id: str) -> bytes:
    return json.dumps(
        {"id": event_id, "type": "customer.created", "data": {"customer_id": "cus_fixture"}},
        separators=(",", ":"),
    ).encode()


def shaped_sample_body(provider: str, n: str, note: str) -> bytes | None:
    """A body shaped as the sample providers whose deliveries are no single JSON object with
    ``id`` and ``type`` expect it (a SendGrid batch, Discord interactions and webhook events),
    else None. ``note`` lands in every event (a marker, or fuzzed text)."""
    if provider == "sendgrid":  # a batch: one event with its id, one without
        batch = [
            {"event": "delivered", "sg_event_id": f"sg_{n}", "note": note},
            {"event": "open", "email": f"{n}@example.com", "note": note},
        ]
        return json.dumps(batch).encode()
    if provider == "discord":
        interaction = {"type": 2, "id": f"1{n}", "data": {"name": "sample", "note": note}}
        return json.dumps(interaction).encode()
    if provider == "discord-events":
        event = {"type": "APPLICATION_AUTHORIZED", "data": {"n": n, "note": note}}
        return json.dumps({"version": 1, "application_id": "1", "type": 1, "event": event}).encode()
    return None


def write_fixtures() -> None:
    from webhook_inbox.ingest.providers import load_config_text, sign_delivery

    acme = load_config_text(sample_config_text())["acme"]
    for filename, (shape, event_id) in FIXTURES.items():
        body = fixture_body(event_id)
        headers = sign_delivery(acme, body, event_id=event_id).headers
        event = SHAPES[shape]("acme", body, headers)
        # Stable request ids so regenerating does not churn the files.
        event["requestContext"]["requestId"] = f"fixture-{shape}"
        (EVENTS_DIR / filename).write_text(json.dumps(event, indent=2) + "\n")


if __name__ == "__main__":
    write_fixtures()
