"""One signed sample delivery per configured provider family, shaped as that sender shapes events.

A sample must work as printed: accepted by ingest and, where a handler is registered for the
provider, processed by it (the bodies carry the fields the example handlers read: Stripe's
``data.object.id``, a Standard Webhooks sender's ``data.id``). A provider without handlers gets
a realistic event of its own kind, which the processor marks ``ignored``.
"""

from __future__ import annotations

import json
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from webhook_inbox import providers
from webhook_inbox.domain import Handler
from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.cli.signing import curl_command, destination

# (body, event type, event id for the id header where the scheme has one). The body is a JSON
# object (an array for batch senders; the fields of a form for form senders).
Builder = Callable[[int], tuple[Any, str, str | None]]


@dataclass(frozen=True)
class Sample:
    provider: str
    scheme: str
    event_type: str
    outcome: str  # what the pipeline will do with it (without a curl: why there is none)
    curl: str | None  # None: the configuration holds no key that signs (public keys only)


def _uid() -> str:
    return uuid.uuid4().hex[:12]


def _stripe(now: int) -> tuple[dict[str, Any], str, str | None]:
    event_id = f"evt_dev_{_uid()}"
    body = {
        "id": event_id,
        "object": "event",
        "type": "customer.created",
        "created": now,
        "data": {"object": {"id": f"cus_{_uid()}", "object": "customer"}},
    }
    return body, "customer.created", event_id


def _standard_webhooks(now: int) -> tuple[dict[str, Any], str, str | None]:
    body = {
        "type": "customer.created",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "schema_version": 1,
        "data": {"id": f"cus_{_uid()}"},
    }
    return body, "customer.created", f"msg_dev_{_uid()}"


def _github(now: int) -> tuple[dict[str, Any], str, str | None]:
    body = {"zen": "Design for failure.", "hook_id": int(_uid(), 16) % 10**9, "sent_at": now}
    return body, "ping", str(uuid.uuid4())


def _shopify(now: int) -> tuple[dict[str, Any], str, str | None]:
    body = {"id": int(_uid(), 16) % 10**12, "financial_status": "pending", "created_at": now}
    return body, "orders/create", str(uuid.uuid4())


def _slack(now: int) -> tuple[dict[str, Any], str, str | None]:
    body = {
        "type": "event_callback",
        "team_id": "T0DEV",
        "event_id": f"Ev{_uid().upper()}",
        "event_time": now,
        "event": {"type": "app_mention", "user": "U0DEV", "text": "hello", "ts": f"{now}.000100"},
    }
    return body, "app_mention", None


def _sendgrid(now: int) -> tuple[list[dict[str, Any]], str, str | None]:
    """A batch, as SendGrid posts it: two events of one message, each with its own id."""
    message = f"{_uid()}.dev"
    batch = [
        {
            "email": "dev@example.com",
            "event": event,
            "sg_event_id": _uid(),
            "sg_message_id": message,
            "timestamp": now,
        }
        for event in ("processed", "delivered")
    ]
    return batch, "processed", None


def _discord(options: dict[str, Any]) -> Builder:
    """A slash command for an Interactions endpoint; an authorization for a Webhook Events one."""

    def build(now: int) -> tuple[dict[str, Any], str, str | None]:
        snowflake = str(int(_uid(), 16))
        if options.get("endpoint") == "webhook-events":
            event_type = "APPLICATION_AUTHORIZED"
            event = {
                "type": event_type,
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)),
                "data": {"user": {"id": snowflake}, "scopes": ["applications.commands"]},
            }
            return (
                {"version": 1, "application_id": "1", "type": 1, "event": event},
                event_type,
                None,
            )
        command = {"name": "hello", "type": 1}
        body = {"type": 2, "id": snowflake, "token": "dev", "version": 1, "data": command}
        return body, "APPLICATION_COMMAND", None

    return build


def _iso(now: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def _twilio(now: int) -> tuple[dict[str, Any], str, str | None]:
    # A Messaging status callback (a form); the event id fills I-Twilio-Idempotency-Token.
    sid = "SM" + uuid.uuid4().hex
    body = {
        "AccountSid": "AC" + "0" * 32,
        "MessageSid": sid,
        "SmsSid": sid,
        "MessageStatus": "delivered",
        "SmsStatus": "delivered",
        "From": "+15005550006",
        "To": "+15005550001",
        "ApiVersion": "2010-04-01",
    }
    return body, "message.delivered", str(uuid.uuid4())


def _square(now: int) -> tuple[dict[str, Any], str, str | None]:
    payment = f"pay_{_uid()}"
    body = {
        "merchant_id": "MLDEVMERCHANT",
        "type": "payment.created",
        "event_id": str(uuid.uuid4()),
        "created_at": _iso(now),
        "data": {"type": "payment", "id": payment, "object": {"payment": {"id": payment}}},
    }
    return body, "payment.created", None


def _hubspot(now: int) -> tuple[list[dict[str, Any]], str, str | None]:
    event = {
        "eventId": int(_uid(), 16) % 10**9,
        "subscriptionId": 1001,
        "portalId": 62515,
        "appId": 54321,
        "occurredAt": now * 1000,
        "subscriptionType": "contact.creation",
        "attemptNumber": 0,
        "objectId": int(_uid(), 16) % 10**9,
        "changeSource": "CRM",
        "changeFlag": "NEW",
    }
    return [event], "contact.creation", None


def _paddle(now: int) -> tuple[dict[str, Any], str, str | None]:
    body = {
        "event_id": f"evt_dev_{_uid()}",
        "event_type": "customer.created",
        "occurred_at": _iso(now),
        "notification_id": f"ntf_dev_{_uid()}",
        "data": {"id": f"ctm_dev_{_uid()}", "status": "active"},
    }
    return body, "customer.created", None


def _mailgun(now: int) -> tuple[dict[str, Any], str, str | None]:
    # The event-data: signing wraps it in {"signature": {...}, "event-data": ...}, with a fresh
    # token (the signed key), as Mailgun does.
    body = {
        "id": _uid(),
        "event": "delivered",
        "timestamp": float(now),
        "recipient": "alice@example.com",
        "message": {"headers": {"message-id": f"{_uid()}@mg.example.com"}},
    }
    return body, "delivered", None


def _linear(now: int) -> tuple[dict[str, Any], str, str | None]:
    # Signing stamps webhookTimestamp into the body, as Linear does on every attempt.
    body = {
        "action": "create",
        "type": "Issue",
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now)),
        "organizationId": "org-dev",
        "webhookId": "webhook-dev",
        "url": "https://linear.app/dev/issue/DEV-1",
        "data": {"id": str(uuid.uuid4()), "identifier": "DEV-1", "title": "Sample issue"},
    }
    return body, "Issue.create", str(uuid.uuid4())


def _zoom(now: int) -> tuple[dict[str, Any], str, str | None]:
    meeting = int(_uid(), 16) % 10**11
    body = {
        "event": "meeting.started",
        "event_ts": now * 1000,
        "payload": {
            "account_id": "dev-account",
            "object": {"id": str(meeting), "uuid": f"{_uid()}==", "topic": "Sample meeting"},
        },
    }
    return body, "meeting.started", None


def _twitch(now: int) -> tuple[dict[str, Any], str, str | None]:
    broadcaster = str(int(_uid(), 16) % 10**8)
    body = {
        "subscription": {
            "id": str(uuid.uuid4()),
            "status": "enabled",
            "type": "channel.follow",
            "version": "2",
            "condition": {"broadcaster_user_id": broadcaster, "moderator_user_id": broadcaster},
            "transport": {"method": "webhook", "callback": "https://example.com/webhooks/twitch"},
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        },
        "event": {
            "user_id": "1234",
            "user_login": "cool_user",
            "broadcaster_user_id": broadcaster,
            "followed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        },
    }
    return body, "channel.follow", str(uuid.uuid4())


def _gitlab(now: int) -> tuple[dict[str, Any], str, str | None]:
    commit = uuid.uuid4().hex + uuid.uuid4().hex[:8]
    body = {
        "object_kind": "push",
        "event_name": "push",
        "ref": "refs/heads/main",
        "before": "0" * 40,
        "after": commit,
        "project_id": 15,
        "project": {"id": 15, "path_with_namespace": "dev/sample"},
        "commits": [{"id": commit, "message": "Sample commit", "timestamp": now}],
        "total_commits_count": 1,
    }
    return body, "Push Hook", str(uuid.uuid4())  # the Idempotency-Key


def _set_path(document: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = document
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def _generic(options: dict[str, Any]) -> Builder:
    def build(now: int) -> tuple[dict[str, Any], str, str | None]:
        event_id = f"evt_dev_{_uid()}"
        body: dict[str, Any] = {"data": {"id": f"cus_{_uid()}"}, "created": now}
        if options.get("id_path"):
            _set_path(body, options["id_path"], event_id)
        if not options.get("type_header"):
            _set_path(body, options.get("type_path", "type"), "customer.created")
        return body, "customer.created", event_id

    return build


def _builder(provider: providers.Provider) -> Builder:
    scheme = provider.scheme.name
    fixed = {
        "stripe": _stripe,
        "standard-webhooks": _standard_webhooks,
        "github": _github,
        "shopify": _shopify,
        "slack": _slack,
        "twilio": _twilio,
        "square": _square,
        "hubspot": _hubspot,
        "paddle": _paddle,
        "sendgrid": _sendgrid,
        "mailgun": _mailgun,
        "linear": _linear,
        "zoom": _zoom,
        "twitch": _twitch,
        "gitlab": _gitlab,
    }
    if scheme in fixed:
        return fixed[scheme]
    if scheme == "discord":
        return _discord(dict(provider.scheme.options))
    return _generic(dict(provider.scheme.options))


def application_handlers() -> Mapping[tuple[str, str], Handler]:
    """The map the processor installs, imported when first needed: your application's code is
    not the CLI's, and an error in it must not stop every command (an operator still lists and
    replays events while a handler is being fixed)."""
    try:
        from webhook_inbox_app.handlers import HANDLERS
    except Exception as exc:  # noqa: BLE001 - anything your application's import raises
        raise ConfigurationError(
            f"your application does not import (webhook_inbox_app.handlers): {_import_error(exc)}"
        ) from None
    return HANDLERS


def _import_error(exc: Exception) -> str:
    """The error and where it was raised: a SyntaxError's file and line, else the last frame."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} at {exc.filename}, line {exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}, line {frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _representatives(
    registry: providers.Registry, handlers: Mapping[tuple[str, str], Handler]
) -> list[providers.Provider]:
    """One provider per scheme: the first (by name) with handlers, else the first by name."""
    with_handlers = {provider for provider, _ in handlers}
    chosen: dict[str, providers.Provider] = {}
    for name in sorted(registry.providers):
        provider = registry.providers[name]
        current = chosen.get(provider.scheme.name)
        if current is None or (name in with_handlers and current.name not in with_handlers):
            chosen[provider.scheme.name] = provider
    return [chosen[scheme] for scheme in sorted(chosen)]


def sample_deliveries(registry: providers.Registry, base_url: str) -> list[Sample]:
    now = int(time.time())
    handlers = application_handlers()
    samples = []
    for provider in _representatives(registry, handlers):
        payload, event_type, event_id = _builder(provider)(now)
        if provider.scheme.body_format == "form":
            body = urlencode(payload).encode()
        else:
            body = json.dumps(payload, separators=(",", ":")).encode()
        target = f"{base_url}/webhooks/{provider.name}"
        try:
            signed = providers.sign_delivery(
                provider, body, event_id=event_id, timestamp=now, event_type=event_type, url=target
            )
        except ConfigurationError as exc:
            # Public keys only verify. The stack serves the provider all the same; the sender
            # (or `sign --signing-key-file`) signs.
            why = (
                f"{exc}; with the private key: webhook-inbox sign {provider.name} FILE "
                f"--signing-key-file KEY --format curl --url {base_url}"
            )
            samples.append(Sample(provider.name, provider.scheme.name, event_type, why, None))
            continue
        handler = handlers.get((provider.name, event_type))
        outcome = f"processed by {handler.__name__}" if handler else "no handler: ignored"
        url = destination(provider, target, signed)
        curl = curl_command(url, signed.headers, signed.body, None)
        samples.append(Sample(provider.name, provider.scheme.name, event_type, outcome, curl))
    return samples
