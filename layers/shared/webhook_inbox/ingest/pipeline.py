"""The ingest pipeline: HTTP event → verified, validated, claimed and enqueued inbox rows.

decode the event shape → body size limit → provider lookup → signature → body parsing →
identify (one event, a batch of events, or a handshake to answer) → claim (one round trip,
autocommit, enqueued_at stamped) → SendMessage ``{"id": row}`` per new row, and per duplicate of
a waiting row whose stamp is old (``rewake``) → reply (a failed send clears the stamp so the next
sweep sends the row).

Errors become HTTP answers in exactly one place, :func:`handle`. Every authentication failure
gets the same 401 body; the reason (signature / stale) goes to logs and metrics only. The outcome
carries provider, event id and type, outcome and duration for the entry point's log line, never
the body or a secret.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from psycopg import Connection

from webhook_inbox import aws, deadlines, idle_ledger
from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    MethodNotAllowed,
    PayloadTooLarge,
    ProvidersUnavailable,
    RequestRejected,
    SecretUnavailable,
    SenderUnavailable,
    StoreConflict,
    StoreError,
    StoreUnavailable,
    UnknownProvider,
)
from webhook_inbox.ingest import bodies, provider_source
from webhook_inbox.ingest.providers import Provider, Registry
from webhook_inbox.ingest.schemes import Delivery, Identity, Reply, Scheme
from webhook_inbox.settings import IngestSettings
from webhook_inbox.store import db, inbox

# A batch delivery (SendGrid, HubSpot) stores every event it carries, but ingest sends at most
# this many wake-ups itself (ten SendMessageBatch calls); the sweeper sends the rest within a
# sweep, so a large batch cannot run ingest out of its time.
MAX_WAKEUPS_PER_DELIVERY = 100
# The longest an ingest invocation writes after its activity mark: its 8 s timeout, rounded up.
INGEST_HORIZON_S = 10.0
_PROVIDER_PATH = re.compile(r"/webhooks/([^/]+)/?$")

# The clock, as a module attribute so tests can freeze it at a tolerance boundary.
current_time: Callable[[], float] = time.time

_GENERIC_BODIES = {
    401: Reply.json({"error": "unauthorized"}, 401),
    404: Reply.json({"error": "unknown provider"}, 404),
    405: Reply.json({"error": "method not allowed"}, 405),
    413: Reply.json({"error": "payload too large"}, 413),
    500: Reply.json({"error": "internal error"}, 500),
    503: Reply.json({"error": "temporarily unavailable, retry later"}, 503),
}
_ACCEPTED = Reply.json({"status": "accepted"}, 202)
_DUPLICATE = Reply.json({"status": "duplicate"}, 200)


@dataclass
class Outcome:
    """What happened to one delivery: the HTTP reply plus the facts for its log line, from which
    the template's metric filters count it (``outcome``, ``reason``, ``enqueue_failed``).

    ``event_id`` and ``row_id`` name the delivery's event, or its first one when it carried a
    batch (``events`` counts them, ``new_events`` those stored for the first time). ``reason``
    says why for a rejection (signature, stale, schema, …) and for ``unavailable``: ``store``
    (the database), ``secret`` (Secrets Manager), ``providers_registry`` (no usable copy) or
    ``sender`` (a sender's certificate or subscription confirmation, errors.SenderUnavailable).
    """

    reply: Reply
    outcome: str  # accepted | duplicate | rejected | handshake | unavailable | error
    reason: str | None = None
    detail: str | None = None
    provider: str | None = None  # only a configured provider name (a bounded dimension)
    event_id: str | None = None
    event_type: str | None = None
    delivery_id: str | None = None
    row_id: int | None = None
    events: int = 0
    new_events: int = 0
    enqueue_failed: bool = False
    duration_ms: float = 0.0
    # This delivery's failed read of the providers registry: its reason code (an AWS error
    # code, or "invalid_document") for the entry point's providers_refresh_failed line.
    providers_refresh_failed: str | None = None
    # The age of a registry copy past its refresh whose re-read failed: its refusals may be old.
    providers_stale_s: float | None = None
    # The idle ledger's mark could not be written (its AWS error code): see _accept.
    activity_mark_failed: str | None = None

    @property
    def status(self) -> int:
        return self.reply.status

    def unavailable(self, reason: str, detail: str) -> None:
        """A retriable 503; ``reason``: store, secret, providers_registry or sender."""
        self.reply, self.outcome = _GENERIC_BODIES[503], "unavailable"
        self.reason, self.detail = reason, detail

    def response(self) -> dict[str, Any]:
        """A proxy response valid for REST v1, HTTP API v2 and Function URLs alike."""
        headers = {"Content-Type": self.reply.content_type, **dict(self.reply.headers)}
        if self.status == 503:
            headers["Retry-After"] = "5"
        return {
            "statusCode": self.status,
            "headers": headers,
            "body": self.reply.body,
            "isBase64Encoded": False,
        }


# --- decoding ----------------------------------------------------------------------------


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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _request_line(event: Mapping[str, Any], headers: Mapping[str, str]) -> tuple[str, str]:
    """The method and the URL the sender called, as far as the event tells them.

    HTTP API (v2) and Function URL events carry the raw path and query string; a REST API (v1)
    event carries the stage-prefixed path and only the decoded query parameters, re-encoded
    here. A custom domain or a base path mapping changes what the sender called, which is why
    URL-signed providers take a ``public_url`` (docs/providers.md).
    """
    context = event.get("requestContext")
    context = context if isinstance(context, Mapping) else {}
    http = context.get("http")
    http = http if isinstance(http, Mapping) else {}
    method = _text(http.get("method")) or _text(event.get("httpMethod")) or "POST"
    host = _text(context.get("domainName")) or headers.get("host", "")
    proto = headers.get("x-forwarded-proto", "https").split(",", 1)[0].strip() or "https"
    if "rawPath" in event:  # v2 and Function URLs
        path, query = _text(event.get("rawPath")), _text(event.get("rawQueryString"))
    else:  # v1: requestContext.path includes the stage on the execute-api domain
        path = _text(context.get("path")) or _text(event.get("path"))
        params = event.get("multiValueQueryStringParameters")
        query = urlencode(params, doseq=True) if isinstance(params, Mapping) else ""
    url = f"{proto}://{host}{path}" + (f"?{query}" if query else "")
    return method.upper(), url


def decode_event(
    event: Any, limit: int, too_large: str = "body over the limit"
) -> tuple[str, Delivery]:
    """The provider name and the delivery (raw body bytes, headers, method and URL) from any of
    the three event shapes. The size limit is enforced before any parsing (and before decoding
    base64); ``too_large`` is the 413's detail."""
    if not isinstance(event, Mapping):
        raise InvalidPayload("not an HTTP event")
    body = event.get("body") or ""
    if not isinstance(body, str):
        raise InvalidPayload("not an HTTP event")
    if event.get("isBase64Encoded"):
        if len(body) > 4 * ((limit + 2) // 3):
            raise PayloadTooLarge(too_large)
        try:
            raw = base64.b64decode(body, validate=True)
        except ValueError:  # binascii.Error, or ValueError for a non-ASCII str (found by fuzzing)
            raise InvalidPayload("body is not valid base64") from None
    else:
        if len(body) > limit:
            raise PayloadTooLarge(too_large)
        try:
            raw = body.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidPayload("body is not valid text") from None
    if len(raw) > limit:
        raise PayloadTooLarge(too_large)
    headers = _headers(event)
    method, url = _request_line(event, headers)
    return _provider_name(event), Delivery(headers, raw, method, url)


# --- the pipeline ------------------------------------------------------------------------


def _send_wakeups(
    sqs_client: Callable[[], Any], queue_url: str, row_ids: Sequence[int]
) -> tuple[list[int], str]:
    """Send the wake-ups for ``row_ids``: (the ids not sent, why) — never raises."""
    if not queue_url:
        return list(row_ids), "PROCESSING_QUEUE_URL is not set"
    if len(row_ids) == 1:  # the common case: one SendMessage
        error = aws.send_wakeup(sqs_client(), queue_url, row_ids[0])
        return ([], "") if error is None else (list(row_ids), error)
    now, later = row_ids[:MAX_WAKEUPS_PER_DELIVERY], list(row_ids[MAX_WAKEUPS_PER_DELIVERY:])
    sent = aws.send_wakeups(sqs_client(), queue_url, now, stop_after_failure=True)
    errors = sorted({type(e).__name__ for e in sent.errors} | {code for _, code in sent.rejected})
    return sent.unsent + later, ", ".join(errors)


def _accept(
    outcome: Outcome,
    *,
    provider: str,
    scheme: Scheme,
    identities: Sequence[Identity],
    payload: Any,
    stored: Any,
    body: bytes,
    sqs_client: Callable[[], Any],
    queue_url: str,
    ledger_bucket: str = "",
) -> None:
    """Claim the delivery's events, answer from the claims, wake the processor for new rows.

    ``payload`` is the parsed body; ``stored`` what an event without a payload of its own stores
    (the same value, or the body's text when the scheme keeps it as it came)."""
    events = [
        inbox.NewEvent(
            event_id=identity.event_id,
            event_type=identity.event_type,
            payload=stored if identity.payload is None else identity.payload,
            delivery_id=identity.delivery_id,
        )
        for identity in identities
    ]
    # Announce the write before it, so the sweeper looks at the database after it (at most one
    # PUT per warm environment per 5 minutes). A failed mark does not refuse the delivery: the
    # next invocation tries again, and the sweeper's backstop bounds what goes unannounced.
    outcome.activity_mark_failed = idle_ledger.mark_activity(
        ledger_bucket, horizon_s=INGEST_HORIZON_S
    )
    # The claim is its own (autocommit) transaction and idempotent: safe to repeat when the
    # kept connection turns out to have been closed while the function was frozen.
    claims, retried = db.run_repeatable(
        lambda conn: inbox.claim_events(
            conn,
            provider=provider,
            events=events,
            body_sha256=hashlib.sha256(body).digest(),
            # Stamp enqueued_at in the claim itself: the happy path is one round trip.
            enqueuing=bool(queue_url),
        ),
        application_name="webhook-inbox-ingest",
    )
    first = next(c for c in claims if c.event_id == identities[0].event_id)
    new = [c.id for c in claims if c.is_new]
    outcome.row_id, outcome.events, outcome.new_events = first.id, len(claims), len(new)
    outcome.reply, outcome.outcome = (_ACCEPTED, "accepted") if new else (_DUPLICATE, "duplicate")
    outcome.reply = scheme.acknowledge(payload, new=bool(new)) or outcome.reply
    if not new and not all(c.counted for c in claims):
        # A processor's batch held the row: answered from the stored row, without the count.
        outcome.detail = "delivery not counted: the event is being processed"
    # A duplicate of a row still waiting whose stamp is old (a 503 answered after its claim
    # had committed, say) was stamped again by the claim: its wake-up goes out once more.
    wake = new + [c.id for c in claims if c.rewake]
    if retried:
        # The first attempt may have stored rows (and stamped enqueued_at) before the
        # connection dropped, so they look like duplicates now: wake them too. A second
        # wake-up is harmless.
        wake += [c.id for c in claims if not c.is_new and not c.rewake and c.status == "received"]
    if wake:
        conn = db.get_connection("webhook-inbox-ingest")  # the one the claim ran on
        _wake(outcome, wake, conn=conn, sqs_client=sqs_client, queue_url=queue_url)


def _wake(
    outcome: Outcome,
    row_ids: list[int],
    *,
    conn: Connection[Any],
    sqs_client: Callable[[], Any],
    queue_url: str,
) -> None:
    """Send the rows' wake-ups; clear the stamp of those not sent, so the next sweep sends them.

    The rows are durable either way: the answer stays 2xx. If even the clear fails, the
    sweeper's stale rule re-sends the rows later.
    """
    unsent, error = _send_wakeups(sqs_client, queue_url, row_ids)
    if not unsent:
        return
    if error:
        outcome.enqueue_failed, outcome.detail = True, f"enqueue failed: {error}"
    try:
        with deadlines.deadline(db.answer_deadline_s(), db.current_connection):
            inbox.clear_enqueued(conn, unsent)
    except StoreError as exc:
        db.discard_connection()
        outcome.detail = f"{outcome.detail or ''}; clear_enqueued failed: {exc}".lstrip("; ")


def _find_provider(
    name: str, configured: IngestSettings, providers: Registry | None, outcome: Outcome
) -> Provider:
    """The configured provider called ``name`` (an unknown name is a 404), from ``providers``
    when given, else from the execution environment's copy of the configuration; notes on
    ``outcome`` the provider and a failed re-read of the registry."""
    if providers is None:
        served = provider_source.serve(
            configured.providers_registry_arn,
            configured.providers_refresh_s,
            configured.providers_max_age_s,
            configured.providers_config,
            configured.providers_config_file,
        )
        providers, outcome.providers_refresh_failed = served.registry, served.refresh_failed
        outcome.providers_stale_s = served.stale_age_s
    provider = providers.get(name)
    if provider is None:
        raise UnknownProvider("no such provider")
    outcome.provider = provider.name
    return provider


def _events_of(
    provider: Provider, delivery: Delivery
) -> tuple[Sequence[Identity] | Reply, Any, bool]:
    """What a delivery carries (its events, or the handshake to answer), its parsed body, and
    whether verifying parsed it (a signature inside the body)."""
    now = int(current_time())
    handshake = provider.handshake(delivery, now=now)
    if handshake is not None:  # unsigned, allowed by the scheme's own check, never stored
        return handshake, None, False
    if delivery.method == "GET":  # no sender delivers events by GET: a crawler, a probe
        raise MethodNotAllowed("a GET that is no challenge of this provider's")
    verified = provider.verify(delivery, now=now)
    scheme = provider.scheme
    payload = scheme.parse(delivery) if verified.payload is None else verified.payload
    return scheme.identify(delivery, payload, verified), payload, verified.payload is not None


def _named(outcome: Outcome, found: Sequence[Identity]) -> Sequence[Identity]:
    """The delivery's events, the first one's names noted on ``outcome``; none is a 400."""
    if not found:
        raise InvalidPayload("the delivery carries no event")
    outcome.event_id, outcome.event_type = found[0].event_id, found[0].event_type
    outcome.delivery_id = found[0].delivery_id
    return found


def handle(
    event: Any,
    *,
    sqs_client: Callable[[], Any],
    settings: Callable[[], IngestSettings],
    providers: Registry | None = None,
) -> Outcome:
    """Run one delivery through the pipeline; never raises for anything a request can cause.

    ``settings`` and ``sqs_client`` give the execution environment's (built on first use): a
    settings error is then this delivery's 500 outcome, logged like any other."""
    started = time.perf_counter()
    outcome = Outcome(_GENERIC_BODIES[500], "error")
    scheme: Scheme | None = None
    try:
        configured = settings()
        provider_name, delivery = decode_event(
            event, *bodies.body_limit(configured.max_body_bytes, configured.memory_mb)
        )
        provider = _find_provider(provider_name, configured, providers, outcome)
        scheme = provider.scheme
        delivery = provider.as_called(delivery)
        found, payload, parsed_by_verify = _events_of(provider, delivery)
        if isinstance(found, Reply):
            outcome.reply, outcome.outcome = found, "handshake"
        else:
            as_is = not parsed_by_verify and scheme.stores_body_as_is
            _accept(
                outcome,
                provider=provider.name,
                scheme=scheme,
                identities=_named(outcome, found),
                payload=payload,
                # parse() checked it: jsonb accepts the text, which is what payload holds.
                stored=inbox.JsonText(delivery.body.decode()) if as_is else payload,
                body=delivery.body,
                sqs_client=sqs_client,
                queue_url=configured.queue_url,
                ledger_bucket=configured.idle_ledger_bucket,
            )
    except RequestRejected as exc:
        stale = outcome.providers_stale_s
        if stale is not None and isinstance(exc, (UnknownProvider, AuthenticationFailed)):
            # Refused by a copy of the registry that cannot be re-read: the provider or the
            # secret may have been added since. A 503 is retried; a 4xx may be dropped for good.
            copy = f"a providers registry copy {stale:.0f} s old that cannot be re-read"
            outcome.unavailable("providers_registry", f"{exc.reason} by {copy}")
        else:
            outcome.reply = _GENERIC_BODIES.get(exc.status) or Reply.json(
                {"error": "invalid payload", "detail": exc.detail}, exc.status
            )
            outcome.outcome, outcome.reason, outcome.detail = "rejected", exc.reason, exc.detail
    except (StoreUnavailable, StoreConflict) as exc:
        db.discard_connection()
        outcome.unavailable("store", str(exc))
    except ProvidersUnavailable as exc:
        # No copy of the registry may serve. Each failed read has its own line, which the
        # providers-refresh-failed alarm counts: not an unreadable secret too (one cause, one page).
        outcome.unavailable("providers_registry", str(exc))
        outcome.providers_refresh_failed = exc.refresh_failed
    except SecretUnavailable as exc:
        # A provider's secret or the database's: the SecretUnavailable alarm watches these.
        outcome.unavailable("secret", str(exc))
    except SenderUnavailable as exc:
        # A certificate to download or pin, a subscription to confirm: the sender retries a
        # 503 (SNS drops a 4xx for good), and the SenderUnavailable alarm pages.
        outcome.unavailable("sender", f"{exc.cause}: {exc}")
    except StoreError as exc:
        db.discard_connection()
        outcome.detail = str(exc)
    except ConfigurationError as exc:
        outcome.detail = f"configuration: {exc}"
    if scheme is not None and scheme.empty_answers:
        # Xero counts an answer with a body as a failure, a 401 included.
        outcome.reply = Reply("", outcome.reply.status, "text/plain", outcome.reply.headers)
    outcome.duration_ms = round((time.perf_counter() - started) * 1000, 2)
    return outcome
