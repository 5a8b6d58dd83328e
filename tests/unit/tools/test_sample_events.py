"""The sample events `trigger` sends and `dev` prints (tools/webhook_inbox_tools/samples/): every
one, for every provider of the shipped configuration, verifies and is identified as its type."""

from __future__ import annotations

import json
import time

import pytest

from tests.support import ROOT
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import providers, schemes
from webhook_inbox_tools import sample_events
from webhook_inbox_tools.sample_events import Override, apply_override, parse_override

REGISTRY = providers.load_config_text((ROOT / "events" / "providers.local.json").read_text())
CASES = [
    (name, event_type)
    for name in sorted(REGISTRY.providers)
    for event_type in sample_events.event_types(REGISTRY.providers[name])
]


def test_every_scheme_has_samples_and_every_provider_several_types() -> None:
    served = {p.scheme.name for p in REGISTRY.providers.values()}
    assert {p.stem for p in sample_events.SAMPLES_DIR.glob("*.json")} >= served
    for provider in REGISTRY.providers.values():
        assert len(sample_events.event_types(provider)) >= 2, provider.name


@pytest.mark.parametrize(("name", "event_type"), CASES)
def test_a_sample_verifies_and_is_identified_as_its_type(name: str, event_type: str) -> None:
    provider = REGISTRY.providers[name]
    now = int(time.time())
    built = sample_events.build(provider, event_type, now=now)
    url = f"http://127.0.0.1:3000/webhooks/{name}"
    signed = providers.sign_delivery(
        provider, built.body, event_id=built.event_id, timestamp=now, event_type=event_type, url=url
    )
    delivery = provider.as_called(schemes.Delivery(signed.headers, signed.body, "POST", signed.url))
    verified = provider.verify(delivery, now=now)
    payload = provider.scheme.parse(delivery) if verified.payload is None else verified.payload
    found = provider.scheme.identify(delivery, payload, verified)
    assert isinstance(found, list)
    assert found
    assert {identity.event_type for identity in found} == {event_type}


def test_each_delivery_is_fresh_and_ids_agree_within_one() -> None:
    stripe = REGISTRY.providers["stripe"]
    first = sample_events.build(stripe, "customer.created", now=1_700_000_000)
    second = sample_events.build(stripe, "customer.created", now=1_700_000_000)
    assert first.event_id != second.event_id
    body = json.loads(first.body)
    assert body["id"] == first.event_id
    assert body["created"] == 1_700_000_000


def test_overrides_set_dotted_paths_with_json_values() -> None:
    stripe = REGISTRY.providers["stripe"]
    built = sample_events.build(
        stripe,
        "customer.created",
        now=1_700_000_000,
        overrides=[
            parse_override("data.object.id=cus_fixed"),
            parse_override("data.object.balance=250"),
            parse_override("metadata.new.deep=true"),
        ],
    )
    body = json.loads(built.body)
    assert body["data"]["object"]["id"] == "cus_fixed"
    assert body["data"]["object"]["balance"] == 250
    assert body["metadata"] == {"new": {"deep": True}}
    batch = [{"email": "a@example.com"}]
    apply_override(batch, parse_override("0.email=b@example.com"))
    assert batch == [{"email": "b@example.com"}]


@pytest.mark.parametrize("text", ["no-equals", "=x", "a..b=1", ".a=1"])
def test_a_malformed_override_is_a_configuration_error(text: str) -> None:
    with pytest.raises(ConfigurationError, match="FIELD=VALUE"):
        parse_override(text)


def test_an_override_through_a_scalar_or_out_of_range_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="not an object"):
        apply_override({"type": "x"}, Override(("type", "inner"), 1))
    with pytest.raises(ConfigurationError, match="not an index"):
        apply_override([{}], Override(("3", "email"), "x"))


def test_an_unknown_type_names_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"customer\.created"):
        sample_events.build(REGISTRY.providers["stripe"], "no.such.type", now=1)


def test_every_type_a_handler_is_registered_for_can_be_triggered() -> None:
    from webhook_inbox_app.handlers import HANDLERS

    for provider, event_type in HANDLERS:
        assert event_type in sample_events.event_types(REGISTRY.providers[provider]), event_type


def test_dev_prints_a_sample_a_handler_processes_where_there_is_one() -> None:
    from webhook_inbox_app.handlers import HANDLERS

    stripe_types = [t for p, t in HANDLERS if p == "stripe"]
    assert sample_events.preferred_type(REGISTRY.providers["stripe"], stripe_types) in stripe_types
    assert sample_events.preferred_type(REGISTRY.providers["github"], []) == "ping"
