"""The sample events (tools/webhook_inbox_tools/samples/) against what the providers publish
about their payloads, and the rules every sample file follows.

Each sample is checked as ``trigger`` sends it: built by the project's own builder, placeholders
replaced. The descriptions are packages of the public registries at pinned versions, downloaded
once per session (per worker under xdist) and checked against pinned digests
(tests/sample_sources.py); a download that fails fails these tests:

- GitHub: @octokit/webhooks-schemas, a JSON Schema per event and action;
- Stripe, Square, Paddle: their official Python SDKs' types (every field a sample carries must
  be declared, with a value of its type); Twilio and HubSpot: the statuses and subscription types
  their SDKs name;
- Slack: @slack/types' event interfaces; Linear: @linear/sdk's webhook payload types;
  Discord: discord-interactions' interaction and webhook event types.

Shopify, GitLab, Zoom, Twitch, Mailgun and SendGrid publish no machine-readable description of
their payloads on the registries: their samples follow the documentation each file names.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator

from tests.conftest import SESSION_TMP
from tests.sample_sources import DISCORD_INTERACTIONS, LINEAR_SDK, SLACK_TYPES, Sources
from tests.sample_typescript import (
    check_slack_event,
    linear_schema,
    linear_types,
    linear_unions,
    slack_events,
)
from tests.support import ROOT
from webhook_inbox.ingest import bodies, providers, schemes
from webhook_inbox_tools import sample_events

REGISTRY = providers.load_config_text((ROOT / "events" / "providers.local.json").read_text())
# One provider per scheme, each endpoint kind of Discord's.
PROVIDERS = sorted(
    {(p.scheme.name, str(p.scheme.options.get("endpoint"))): n for n, p in sorted(
        REGISTRY.providers.items(), reverse=True)}.values()
)  # fmt: skip
NOW = int(time.time())

# How many types each file carries at least: a provider's ten most common, or all it has.
MINIMUM = dict.fromkeys(
    ("stripe", "github", "gitlab", "shopify", "slack", "square", "paddle", "twilio", "hubspot",
     "sendgrid", "zoom", "twitch", "linear", "discord"),
    10,
)  # fmt: skip
MINIMUM |= {
    "mailgun": 7,  # every kind of event Mailgun's webhooks send
    "paypal": 10,
    # SNS carries other services' messages: SES's three notification types as the example.
    "sns": 3,
    # Not providers: the example handlers' types (docs/local.md) and a sender of your own.
    "standard-webhooks": 4,
    "hmac-sha256": 3,
}
# Named presets of those schemes: each sender's common types (2 to 4), after its documentation.
MINIMUM |= dict.fromkeys(
    ("clerk", "resend", "openai", "replicate", "polar", "intercom", "lemonsqueezy", "razorpay",
     "coinbase-commerce", "checkout-com", "cal-com", "woocommerce", "mux", "zendesk", "docusign",
     "telegram", "sentry", "vercel"),
    4,
)  # fmt: skip
MINIMUM |= dict.fromkeys(("bitbucket", "jira", "gitea", "calendly"), 3)
MINIMUM["typeform"] = 2  # Typeform sends two: a response, and a partial one
# Token senders: Cloud Storage's four object events over Pub/Sub push, Plaid's common codes, the
# App Store's subscription life cycle and its TEST notification.
MINIMUM |= {"google-pubsub": 4, "plaid": 4, "app-store": 6}
# Signatures inside the body and senders with a challenge: each one's common types, after its
# documentation (Dropbox sends two notification kinds: an account's files, a team's folders).
MINIMUM |= dict.fromkeys(("adyen", "braintree", "asana", "xero"), 5)
MINIMUM |= dict.fromkeys(("meta", "x", "microsoft-graph", "okta"), 4)
MINIMUM |= {"whatsapp": 3, "dropbox": 2}
# The types handlers are most often written for, which each file must have.
REQUIRED = {
    "github": {
        "ping", "push", "issues.opened", "issues.closed", "issues.edited", "issues.reopened",
        "pull_request.opened", "pull_request.closed", "pull_request.synchronize",
        "pull_request.reopened", "release.published", "workflow_run.requested",
        "workflow_run.in_progress", "workflow_run.completed",
    },
    "stripe": {
        "invoice.paid", "invoice.payment_failed", "payment_intent.succeeded",
        "payment_intent.payment_failed", "charge.refunded", "customer.subscription.created",
        "customer.subscription.updated", "customer.subscription.deleted",
        "checkout.session.completed", "customer.created", "customer.deleted",
    },
    "standard-webhooks": {"customer.created", "customer.deleted", "subscription.updated"},
}  # fmt: skip
PLACEHOLDER_NAMES = {"uid", "uuid", "hex32", "hex40", "event_id", "number", "now", "now_ms",
                     "iso", "iso_ms", "int"}  # fmt: skip


@pytest.fixture(scope="session")
def sources() -> Iterator[Sources]:
    """The session's downloads, in a folder of the session's temporary one, removed after."""
    folder = Path(tempfile.mkdtemp(prefix="sample-sources-", dir=SESSION_TMP))
    try:
        yield Sources(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@functools.cache
def payloads(name: str) -> dict[str, Any]:
    """{type: payload} of every sample of provider ``name``, as built to be sent (read only)."""
    provider = REGISTRY.providers[name]
    return {
        event_type: bodies.parse(
            provider.scheme.body_format, sample_events.build(provider, event_type, now=NOW).body
        )
        for event_type in sample_events.event_types(provider)
    }


def report(problems: dict[str, list[str]]) -> str:
    return "\n".join(f"{t}: {p}" for t, found in problems.items() for p in found[:20])


# --- GitHub ---------------------------------------------------------------------------------


@pytest.mark.parametrize("event_type", sample_events.event_types(REGISTRY.providers["github"]))
def test_a_github_sample_is_valid_for_octokit_webhooks_schemas(
    sources: Sources, event_type: str
) -> None:
    definitions = sources.octokit_schema()["definitions"]
    event, _, action = event_type.partition(".")
    name = f"{event}${action or 'event'}"
    assert name in definitions, f"@octokit/webhooks-schemas has no {name}: not a GitHub type"
    if not action:  # a bare name is an event GitHub sends without an action
        assert not any(d.startswith(f"{event}$") and d != name for d in definitions), event
    validator = Draft7Validator({"$ref": f"#/definitions/{name}", "definitions": definitions})
    body = payloads("github")[event_type]
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)
    ]
    assert errors == [], "\n".join(errors[:20])


# --- the official SDKs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sdk", "provider"),
    [("stripe", "stripe"), ("square", "square"), ("paddle", "paddle"), ("twilio", "twilio"),
     ("hubspot", "hubspot")],
)  # fmt: skip
def test_samples_match_the_providers_sdk_types(sources: Sources, sdk: str, provider: str) -> None:
    problems = sources.check_with_sdk(sdk, payloads(provider))
    assert set(problems) == set(sample_events.event_types(REGISTRY.providers[provider]))
    found = {t: p for t, p in problems.items() if p}
    assert found == {}, report(found)


# --- TypeScript declarations ----------------------------------------------------------------


def test_slack_samples_match_slack_types(sources: Sources) -> None:
    texts = sources.npm_texts(SLACK_TYPES, r"package/dist/events/[\w-]+\.d\.ts")
    declared = slack_events("\n".join(texts[name] for name in sorted(texts)))
    found = {}
    for event_type, body in payloads("slack").items():
        assert body["type"] == "event_callback"
        assert body["event"]["type"] == event_type
        problems = check_slack_event(body["event"], declared.get(event_type, []))
        if problems:
            found[event_type] = problems
    assert found == {}, report(found)


def test_linear_samples_match_the_linear_sdk_webhook_payload_types(sources: Sources) -> None:
    (text,) = sources.npm_texts(LINEAR_SDK, r"package/dist/index-\w+\.d\.mts").values()
    definitions = linear_schema(linear_types(text), linear_unions(text))["definitions"]
    found = {}
    for event_type, body in payloads("linear").items():
        entity = f"{body['type']}WebhookPayload"
        assert entity in definitions, f"{event_type}: @linear/sdk has no {entity}"
        envelope = json.loads(json.dumps(definitions["EntityWebhookPayload"]))
        envelope["properties"]["data"] = {"$ref": f"#/definitions/{entity}"}
        validator = Draft7Validator({**envelope, "definitions": definitions})
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(body)
        ]
        if errors:
            found[event_type] = errors
    assert found == {}, report(found)


def test_discord_samples_are_discord_interactions_types(sources: Sources) -> None:
    texts = sources.npm_texts(DISCORD_INTERACTIONS, r"package/dist/(index|webhooks)\.js")
    pairs = re.findall(r'InteractionType\["(\w+)"\] = (\d+)\]', texts["package/dist/index.js"])
    interactions = {name: int(number) for name, number in pairs}
    events = set(
        re.findall(r'WebhookEventType\["(\w+)"\] = "\w+"', texts["package/dist/webhooks.js"])
    )
    assert interactions
    assert events
    for name in ("discord", "discord-events"):
        for event_type, body in payloads(name).items():
            if REGISTRY.providers[name].scheme.options["endpoint"] == "interactions":
                assert interactions.get(event_type) == body["type"], event_type
            else:
                assert event_type in events, event_type
                assert body["event"]["type"] == event_type


# --- rules every sample follows -------------------------------------------------------------


def test_every_file_carries_the_common_types_of_its_provider() -> None:
    files = {path.stem for path in sample_events.SAMPLES_DIR.glob("*.json")}
    assert files == set(MINIMUM)
    for scheme, least in MINIMUM.items():
        catalog = sample_events.catalog(scheme)
        assert catalog is not None
        assert len(catalog.events) >= least, (scheme, len(catalog.events))
        assert REQUIRED.get(scheme, set()) <= set(catalog.events), scheme
        assert catalog.default in catalog.events, scheme


def test_github_types_are_event_dot_action_or_a_bare_event() -> None:
    for event_type, body in payloads("github").items():
        event, _, action = event_type.partition(".")
        assert re.fullmatch(r"[a-z_]+", event), event_type
        assert body.get("action") == (action or None), event_type


@pytest.mark.parametrize("name", PROVIDERS)
def test_each_delivery_of_a_sample_is_a_new_event(name: str) -> None:
    """Two deliveries of a type made in the same second are two events (`trigger --count`):
    their keys differ, whatever the scheme keys them by (an id, a header, a digest)."""
    provider = REGISTRY.providers[name]
    for event_type in sample_events.event_types(provider):
        keys = set()
        for _ in range(2):
            built = sample_events.build(provider, event_type, now=NOW)
            signed = providers.sign_delivery(
                provider, built.body, event_id=built.event_id, timestamp=NOW,
                event_type=event_type, url=f"http://127.0.0.1:3000/webhooks/{name}",
            )  # fmt: skip
            delivery = provider.as_called(
                schemes.Delivery(signed.headers, signed.body, "POST", signed.url)
            )
            verified = provider.verify(delivery, now=NOW)
            payload = verified.payload
            if payload is None:
                payload = provider.scheme.parse(delivery)
            found = provider.scheme.identify(delivery, payload, verified)
            assert isinstance(found, list), event_type
            keys |= {identity.event_id for identity in found}
        assert len(keys) == 2, (name, event_type)


@pytest.mark.parametrize("name", PROVIDERS)
def test_version_paths_name_a_whole_number_of_the_payload(name: str) -> None:
    """check-handlers makes the newer event by adding one to the field: it must be there, and
    a whole number (a JSON number, or digits in a form field)."""
    provider = REGISTRY.providers[name]
    catalog = sample_events.catalog(provider.scheme.name)
    assert catalog is not None
    for event_type, payload in payloads(name).items():
        path = catalog.events[event_type].version
        if path is None:
            continue
        node = payload[0] if isinstance(payload, list) else payload
        for key in path.split("."):
            assert isinstance(node, dict), (event_type, path)
            assert key in node, (event_type, path)
            node = node[key]
        whole = isinstance(node, int) and not isinstance(node, bool)
        assert whole or (isinstance(node, str) and node.isdigit()), (event_type, path, node)


def test_every_placeholder_is_one_the_readme_defines() -> None:
    """A misspelt placeholder would be sent as it is written: every ``{name}`` in a sample's
    strings is a README placeholder, or text the provider sends in braces (GitHub's URL
    templates, Shopify's Liquid money formats)."""
    sent_as_is = re.compile(r"/\w+|\+path|\?[\w,]+|archive_format|base|head|sha|amount")
    for path in sorted(sample_events.SAMPLES_DIR.glob("*.json")):
        for text in _strings(json.loads(path.read_text())):
            for inner in re.findall(r"\{([^{}]+)\}", text):
                name = inner.partition("#")[0]
                assert name in PLACEHOLDER_NAMES or sent_as_is.fullmatch(inner), (path.name, text)


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        try:  # JSON inside a string (SNS's Message): its own strings are the ones to look at
            inner = json.loads(node) if node.startswith(("{", "[")) else None
        except ValueError:
            inner = None
        if isinstance(inner, dict | list):
            yield from _strings(inner)
            return
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
