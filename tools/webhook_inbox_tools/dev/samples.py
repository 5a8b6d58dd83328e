"""One signed sample delivery per configured provider family, shaped as that sender shapes events.

A sample must work as printed: accepted by ingest and, where a handler is registered for the
provider, processed by it (the bodies carry the fields the example handlers read: Stripe's
``data.object.id``, a Standard Webhooks sender's ``data.id``). A provider without handlers gets
a realistic event of its own kind, which the processor marks ``ignored``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook_inbox import providers
from webhook_inbox_app.handlers import HANDLERS  # what the processor installs
from webhook_inbox_tools.cli.signing import curl_command, destination

# (body, event type, event id for the id header where the scheme has one)
Builder = Callable[[int], tuple[dict[str, Any], str, str | None]]


@dataclass(frozen=True)
class Sample:
    provider: str
    scheme: str
    event_type: str
    outcome: str  # what the pipeline will do with it, for the console
    curl: str


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
    }
    if scheme in fixed:
        return fixed[scheme]
    return _generic(dict(provider.scheme.options))


def _has_handlers(name: str) -> bool:
    return any(provider == name for provider, _ in HANDLERS)


def _representatives(registry: providers.Registry) -> list[providers.Provider]:
    """One provider per scheme: the first (by name) with handlers, else the first by name."""
    chosen: dict[str, providers.Provider] = {}
    for name in sorted(registry.providers):
        provider = registry.providers[name]
        current = chosen.get(provider.scheme.name)
        if current is None or (_has_handlers(name) and not _has_handlers(current.name)):
            chosen[provider.scheme.name] = provider
    return [chosen[scheme] for scheme in sorted(chosen)]


def sample_deliveries(registry: providers.Registry, base_url: str) -> list[Sample]:
    now = int(time.time())
    samples = []
    for provider in _representatives(registry):
        payload, event_type, event_id = _builder(provider)(now)
        body = json.dumps(payload, separators=(",", ":")).encode()
        target = f"{base_url}/webhooks/{provider.name}"
        signed = providers.sign_delivery(
            provider, body, event_id=event_id, timestamp=now, event_type=event_type, url=target
        )
        handler = HANDLERS.get((provider.name, event_type))
        outcome = f"processed by {handler.__name__}" if handler else "no handler: ignored"
        url = destination(provider, target, signed)
        curl = curl_command(url, signed.headers, signed.body, None)
        samples.append(Sample(provider.name, provider.scheme.name, event_type, outcome, curl))
    return samples
