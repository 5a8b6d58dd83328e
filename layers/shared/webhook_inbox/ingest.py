"""The ingest pipeline: HTTP event → verified, validated, claimed and enqueued inbox row.

decode the event shape → body size limit → provider lookup → signature → JSON validation →
claim (one round trip, autocommit, enqueued_at stamped) → SendMessage ``{"id": row}`` → reply
(a failed send clears the stamp so the next sweep sends the row).

Errors become HTTP answers in exactly one place, :func:`handle`. Every authentication failure
gets the same 401 body; the reason (signature / stale) goes to logs and metrics only. The outcome
carries provider, event id and type, outcome and duration for the entry point's log line, never
the body or a secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook_inbox import aws, db, inbox
from webhook_inbox.config import env, env_int
from webhook_inbox.errors import (
    ConfigurationError,
    InvalidPayload,
    PayloadTooLarge,
    RequestRejected,
    SecretUnavailable,
    StoreConflict,
    StoreError,
    StoreUnavailable,
    UnknownProvider,
)
from webhook_inbox.providers import Registry, registry
from webhook_inbox.schemes import Identity

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 64
_PROVIDER_PATH = re.compile(r"/webhooks/([^/]+)/?$")

# The clock, as a module attribute so tests can freeze it at a tolerance boundary.
current_time: Callable[[], float] = time.time

_GENERIC_BODIES = {
    401: {"error": "unauthorized"},
    404: {"error": "unknown provider"},
    413: {"error": "payload too large"},
    500: {"error": "internal error"},
    503: {"error": "temporarily unavailable, retry later"},
}


@dataclass(frozen=True)
class Delivery:
    provider_name: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Outcome:
    """What happened to one delivery: the HTTP reply plus the facts for logs and metrics."""

    status: int
    reply: dict[str, Any]
    outcome: str  # accepted | duplicate | rejected | handshake | unavailable | error
    metric: str | None
    reason: str | None = None
    detail: str | None = None
    provider: str | None = None  # only a configured provider name (a bounded dimension)
    event_id: str | None = None
    event_type: str | None = None
    delivery_id: str | None = None
    row_id: int | None = None
    enqueue_failed: bool = False
    duration_ms: float = 0.0
    extra_metrics: list[str] = field(default_factory=list)

    def response(self) -> dict[str, Any]:
        """A proxy response valid for REST v1, HTTP API v2 and Function URLs alike."""
        headers = {"Content-Type": "application/json"}
        if self.status == 503:
            headers["Retry-After"] = "5"
        return {
            "statusCode": self.status,
            "headers": headers,
            "body": json.dumps(self.reply, separators=(",", ":")),
            "isBase64Encoded": False,
        }


# --- decoding ----------------------------------------------------------------------------


def max_body_bytes() -> int:
    return env_int("MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)


def _headers(event: Mapping[str, Any]) -> dict[str, str]:
    """Header names lower-cased. REST v1 may also list repeated headers in multiValueHeaders;
    the single-valued map wins, as API Gateway itself puts the last value there."""
    found: dict[str, str] = {}
    multi = event.get("multiValueHeaders")
    if isinstance(multi, Mapping):
        for name, values in multi.items():
            if isinstance(name, str) and isinstance(values, list) and values:
                last = values[-1]
                if isinstance(last, str):
                    found[name.lower()] = last
    single = event.get("headers")
    if isinstance(single, Mapping):
        for name, value in single.items():
            if isinstance(name, str) and isinstance(value, str):
                found[name.lower()] = value
    return found


def _provider_name(event: Mapping[str, Any]) -> str:
    params = event.get("pathParameters")
    if isinstance(params, Mapping) and isinstance(params.get("provider"), str):
        return str(params["provider"])
    path = event.get("rawPath") or event.get("path") or ""
    match = _PROVIDER_PATH.search(path) if isinstance(path, str) else None
    return match.group(1) if match else ""


def decode_event(event: Any, limit: int) -> Delivery:
    """Raw body bytes, headers and provider name from any of the three event shapes.

    The size limit is enforced before any parsing (and before decoding base64)."""
    if not isinstance(event, Mapping):
        raise InvalidPayload("not an HTTP event")
    body = event.get("body") or ""
    if not isinstance(body, str):
        raise InvalidPayload("not an HTTP event")
    if event.get("isBase64Encoded"):
        if len(body) > 4 * ((limit + 2) // 3):
            raise PayloadTooLarge("body over the limit")
        try:
            raw = base64.b64decode(body, validate=True)
        except ValueError:  # binascii.Error, or ValueError for a non-ASCII str (found by fuzzing)
            raise InvalidPayload("body is not valid base64") from None
    else:
        if len(body) > limit:
            raise PayloadTooLarge("body over the limit")
        try:
            raw = body.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPayload("body is not valid text") from None
    if len(raw) > limit:
        raise PayloadTooLarge("body over the limit")
    return Delivery(_provider_name(event), _headers(event), raw)


def parse_payload(body: bytes) -> dict[str, Any]:
    """The signed body as a JSON object that PostgreSQL's jsonb will accept, else 400."""
    try:
        text = body.decode("utf-8")  # strict: json.loads(bytes) would guess UTF-16/32
    except UnicodeDecodeError:
        raise InvalidPayload("body is not UTF-8") from None
    try:
        payload = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise InvalidPayload("JSON nested too deeply") from None
    except ValueError:
        raise InvalidPayload("body is not valid JSON") from None
    if not isinstance(payload, dict):
        raise InvalidPayload("JSON body must be an object")
    # Cheap guards first: without enough brackets the tree cannot be deep, and without a \u
    # escape no string can hold NUL or a lone surrogate (strict UTF-8 and JSON exclude them).
    deep_possible = body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH
    escapes = b"\\u" in body
    if deep_possible or escapes:
        _check_tree(payload, check_strings=escapes)
    return payload


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: jsonb has no infinity
        raise ValueError("number out of range")
    return value


def _bad_string(value: str) -> bool:
    if "\x00" in value:
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_tree(payload: Any, *, check_strings: bool) -> None:
    """Depth, and strings PostgreSQL's jsonb rejects (NUL, lone surrogates)."""
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_JSON_DEPTH:
                raise InvalidPayload(f"JSON nested deeper than {MAX_JSON_DEPTH}")
            for key, value in node.items():
                if check_strings and _bad_string(key):
                    raise InvalidPayload("JSON string holds NUL or a lone surrogate")
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_JSON_DEPTH:
                raise InvalidPayload(f"JSON nested deeper than {MAX_JSON_DEPTH}")
            stack.extend((value, depth + 1) for value in node)
        elif isinstance(node, str) and check_strings and _bad_string(node):
            raise InvalidPayload("JSON string holds NUL or a lone surrogate")


# --- the pipeline ------------------------------------------------------------------------


def _enqueue(sqs_client: Callable[[], Any], row_id: int) -> str | None:
    """Send the wake-up message; returns an error description instead of raising."""
    queue_url = env("PROCESSING_QUEUE_URL")
    if not queue_url:
        return "PROCESSING_QUEUE_URL is not set"
    return aws.send_wakeup(sqs_client(), queue_url, row_id)


def _accept(
    outcome: Outcome,
    *,
    provider: str,
    identity: Identity,
    payload: dict[str, Any],
    body: bytes,
    sqs_client: Callable[[], Any],
) -> None:
    # The claim is its own (autocommit) transaction and idempotent: safe to repeat when the
    # kept connection turns out to have been closed while the function was frozen.
    claim, retried = db.run_repeatable(
        lambda conn: inbox.claim_event(
            conn,
            provider=provider,
            event_id=identity.event_id,
            event_type=identity.event_type,
            body_sha256=hashlib.sha256(body).digest(),
            payload=payload,
            delivery_id=identity.delivery_id,
            # Stamp enqueued_at in the claim itself: the happy path is one round trip.
            enqueuing=bool(env("PROCESSING_QUEUE_URL")),
        ),
        application_name="webhook-inbox-ingest",
    )
    conn = db.get_connection("webhook-inbox-ingest")
    outcome.row_id = claim.id
    if retried and not claim.is_new and claim.status == "received":
        # The first attempt may have stored the row (and stamped enqueued_at) before the
        # connection dropped: send the wake-up anyway. A second wake-up is harmless.
        _enqueue(sqs_client, claim.id)
    if not claim.is_new:
        outcome.status, outcome.reply = 200, {"status": "duplicate"}
        outcome.outcome, outcome.metric = "duplicate", "Duplicate"
        return
    outcome.status, outcome.reply = 202, {"status": "accepted"}
    outcome.outcome, outcome.metric = "accepted", "Accepted"
    error = _enqueue(sqs_client, claim.id)
    if error is None:
        return
    # The row is durable: still 202. Clearing the stamp lets the next sweep send it; if even
    # that fails, the sweeper's stale rule re-sends the row later.
    outcome.enqueue_failed, outcome.detail = True, f"enqueue failed: {error}"
    outcome.extra_metrics.append("EnqueueFailed")
    try:
        inbox.clear_enqueued(conn, [claim.id])
    except StoreError as exc:
        db.discard_connection()
        outcome.detail += f"; clear_enqueued failed: {exc}"


def handle(
    event: Any,
    *,
    sqs_client: Callable[[], Any],
    providers: Registry | None = None,
) -> Outcome:
    """Run one delivery through the pipeline; never raises for anything a request can cause."""
    started = time.perf_counter()
    outcome = Outcome(500, _GENERIC_BODIES[500], "error", None)
    try:
        delivery = decode_event(event, max_body_bytes())
        provider = (providers or registry()).get(delivery.provider_name)
        if provider is None:
            raise UnknownProvider("no such provider")
        outcome.provider = provider.name
        verified = provider.verify(delivery.headers, delivery.body, now=int(current_time()))
        payload = parse_payload(delivery.body)
        identity = provider.identify(delivery.headers, payload, verified, delivery.body)
        outcome.event_type, outcome.delivery_id = identity.event_type, identity.delivery_id
        if identity.reply is not None:
            outcome.status, outcome.reply = 200, identity.reply
            outcome.outcome, outcome.metric = "handshake", None
        else:
            outcome.event_id = identity.event_id
            _accept(
                outcome,
                provider=provider.name,
                identity=identity,
                payload=payload,
                body=delivery.body,
                sqs_client=sqs_client,
            )
    except RequestRejected as exc:
        outcome.status = exc.status
        outcome.reply = _GENERIC_BODIES.get(exc.status) or {
            "error": "invalid payload",
            "detail": exc.detail,
        }
        outcome.outcome, outcome.metric = "rejected", "Rejected"
        outcome.reason, outcome.detail = exc.reason, exc.detail
    except (StoreUnavailable, StoreConflict) as exc:
        db.discard_connection()
        outcome.status, outcome.reply = 503, _GENERIC_BODIES[503]
        outcome.outcome, outcome.metric = "unavailable", "StoreUnavailable"
        outcome.detail = str(exc)
    except SecretUnavailable as exc:
        outcome.status, outcome.reply = 503, _GENERIC_BODIES[503]
        outcome.outcome, outcome.detail = "unavailable", str(exc)
    except StoreError as exc:
        db.discard_connection()
        outcome.detail = str(exc)
    except ConfigurationError as exc:
        outcome.detail = f"configuration: {exc}"
    outcome.duration_ms = round((time.perf_counter() - started) * 1000, 2)
    return outcome
