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
from typing import Any

from tests.support import EVENTS_DIR

SAMPLE_CONFIG_PATH = EVENTS_DIR / "providers.local.json"


def sample_config_text() -> str:
    return SAMPLE_CONFIG_PATH.read_text()


def _body_field(body: bytes, base64_body: bool) -> str:
    return base64.b64encode(body).decode() if base64_body else body.decode("utf-8")


def v1_event(
    provider: str, body: bytes, headers: Mapping[str, str], *, base64_body: bool = False
) -> dict[str, Any]:
    """API Gateway REST API proxy integration (payload 1.0): header case as sent."""
    return {
        "resource": "/webhooks/{provider}",
        "path": f"/webhooks/{provider}",
        "httpMethod": "POST",
        "headers": dict(headers),
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": {"provider": provider},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/webhooks/{provider}",
            "httpMethod": "POST",
            "path": f"/prod/webhooks/{provider}",
            "stage": "prod",
            "requestId": str(uuid.uuid4()),
            "identity": {"sourceIp": "203.0.113.10", "userAgent": "sender/1.0"},
        },
        "body": _body_field(body, base64_body),
        "isBase64Encoded": base64_body,
    }


def v2_event(
    provider: str, body: bytes, headers: Mapping[str, str], *, base64_body: bool = False
) -> dict[str, Any]:
    """HTTP API (payload 2.0): header names lower-cased by API Gateway."""
    return {
        "version": "2.0",
        "routeKey": "POST /webhooks/{provider}",
        "rawPath": f"/webhooks/{provider}",
        "rawQueryString": "",
        "headers": {k.lower(): v for k, v in headers.items()},
        "requestContext": {
            "apiId": "abc123",
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com",
            "http": {
                "method": "POST",
                "path": f"/webhooks/{provider}",
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.10",
                "userAgent": "sender/1.0",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "POST /webhooks/{provider}",
            "stage": "$default",
        },
        "pathParameters": {"provider": provider},
        "body": _body_field(body, base64_body),
        "isBase64Encoded": base64_body,
    }


def function_url_event(
    provider: str, body: bytes, headers: Mapping[str, str], *, base64_body: bool = False
) -> dict[str, Any]:
    """Lambda Function URL (payload 2.0 shape, no route, no path parameters)."""
    event = v2_event(provider, body, headers, base64_body=base64_body)
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


def write_fixtures() -> None:
    from webhook_inbox.providers import load_config_text, sign_delivery

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
