"""HTTP request ⇄ API Gateway HTTP API (payload format 2.0) event, as the real service builds it."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

# HTTP APIs pass these bodies as text and base64-encode everything else.
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")


def _is_text(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media.startswith(_TEXT_TYPES) or media.endswith(("+json", "+xml"))


def http_to_apigw_v2(
    *,
    method: str,
    path: str,
    query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str,
    route_key: str,
    path_parameters: dict[str, str],
    proto: str = "https",
) -> dict[str, Any]:
    """The event an HTTP API gives a Lambda integration for this request.

    Header names are lower-cased and repeated headers joined with commas, as API Gateway does,
    which also adds ``x-forwarded-proto`` (the scheme the client used); a non-text body arrives
    base64-encoded with ``isBase64Encoded`` set.
    """
    merged: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        merged[key] = f"{merged[key]},{value}" if key in merged else value
    merged.setdefault("x-forwarded-proto", proto)
    as_text = _is_text(merged.get("content-type", ""))
    if as_text:
        try:
            encoded, is_b64 = body.decode("utf-8"), False
        except UnicodeDecodeError:
            as_text = False
    if not as_text:
        encoded, is_b64 = base64.b64encode(body).decode("ascii"), True
    now = datetime.now(UTC)
    return {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": merged,
        "pathParameters": path_parameters,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": merged.get("host", "localhost"),
            "domainPrefix": "localhost",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": route_key,
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(time.time() * 1000),
        },
        "body": encoded if body else None,
        "isBase64Encoded": is_b64,
    }


def function_url_event(
    *,
    path: str,
    query: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    source_ip: str,
    caller: str,
    account: str = "123456789012",
) -> dict[str, Any]:
    """The event a Function URL with ``AuthType: AWS_IAM`` gives its function: the HTTP API's
    2.0 format (route ``$default``), and the caller AWS authenticated in
    ``requestContext.authorizer.iam`` (here: ``caller``, as ``userArn`` and ``callerId``)."""
    event = http_to_apigw_v2(
        method="POST",
        path=path,
        query=query,
        headers=headers,
        body=body,
        source_ip=source_ip,
        route_key="$default",
        path_parameters={},
    )
    del event["pathParameters"]  # a Function URL has no routes
    context = event["requestContext"]
    context.update(apiId="local-operator", domainPrefix="local-operator")
    context["authorizer"] = {
        "iam": {
            "accessKey": "local",
            "accountId": account,
            "callerId": caller,
            "cognitoIdentity": None,
            "principalOrgId": None,
            "userArn": caller,
            "userId": caller,
        }
    }
    return event


def delivery_event_v2(
    provider: str, url: str, headers: Mapping[str, str], body: bytes
) -> dict[str, Any]:
    """The HTTP API (v2) event for a provider's signed POST of ``body`` to ``url`` (its
    ``/webhooks/{provider}`` route), as the integration hands it to ingest."""
    where = urlsplit(url)
    return http_to_apigw_v2(
        method="POST",
        path=where.path,
        query=where.query,
        headers=[("host", where.netloc), *headers.items()],
        body=body,
        source_ip="127.0.0.1",
        route_key="POST /webhooks/{provider}",
        path_parameters={"provider": provider},
        proto=where.scheme,
    )


def apigw_response_to_http(response: Any) -> tuple[int, dict[str, str], bytes]:
    """What API Gateway sends back for a handler's return value (format 2.0 rules)."""
    if not isinstance(response, dict) or "statusCode" not in response:
        # Format 2.0 treats any other value as a 200 JSON body.
        import json

        return 200, {"content-type": "application/json"}, json.dumps(response).encode()
    body = response.get("body") or ""
    raw = base64.b64decode(body) if response.get("isBase64Encoded") else str(body).encode()
    headers = {str(k): str(v) for k, v in (response.get("headers") or {}).items()}
    return int(response["statusCode"]), headers, raw


def http_to_apigw_v1(
    *,
    path: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    resource: str,
    path_parameters: dict[str, str],
    stage: str = "prod",
    domain_name: str = "localhost",
    query: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The event a REST API (payload format 1.0) proxy integration gives the function.

    Header names keep the sender's case; the body is text unless it is not UTF-8 (a REST API
    base64-encodes only bodies matching its ``binaryMediaTypes``); query parameters arrive
    decoded; ``requestContext.path`` carries the stage, as on the execute-api domain.
    """
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in headers:
        single[name] = value
        multi.setdefault(name, []).append(value)
    try:
        text, is_b64 = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, is_b64 = base64.b64encode(body).decode("ascii"), True
    return {
        "resource": resource,
        "path": path,
        "httpMethod": "POST",
        "headers": single,
        "multiValueHeaders": multi,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} if query else None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": path_parameters,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource,
            "httpMethod": "POST",
            "path": f"/{stage}{path}",
            "stage": stage,
            "domainName": domain_name,
            "requestId": str(uuid.uuid4()),
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": "127.0.0.1", "userAgent": "webhook-inbox-sign"},
        },
        "body": text,
        "isBase64Encoded": is_b64,
    }
