"""The providers registry document: what ingest and the ``providers`` commands agree on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError
from webhook_inbox.ingest import provider_registry, providers
from webhook_inbox.ingest.provider_registry import (
    HISTORY_LIMIT,
    INITIAL_TEXT,
    RegistryDocument,
    dump_document,
    parse_document,
    with_change,
)

ACME = {
    "scheme": "hmac-sha256",
    "options": {"signature_header": "X-Acme-Signature"},
    "secrets": [
        {"value": "new-secret-value-0123456789", "added_at": "2026-12-02T15:00:00Z"},
        {"value": "old-secret-value-0123456789", "expires_at": "2026-12-03T15:00:00Z"},
    ],
}
ENTRY = {
    "at": "2026-12-02T15:00:00Z",
    "by": "arn:aws:iam::123456789012:user/ops",
    "action": "rotate",
    "provider": "acme",
    "change": {"secrets": {"added": 1, "old_expires_at": "2026-12-03T15:00:00Z"}},
}


def _text(**overrides: Any) -> str:
    document = {"format": 1, "providers": {"acme": ACME}, "history": [ENTRY]}
    document.update(overrides)
    return json.dumps(document)


def test_the_initial_document_is_not_in_use_yet() -> None:
    doc = parse_document(INITIAL_TEXT)
    assert doc == RegistryDocument(None, [])
    assert doc.registry is None


def test_a_document_round_trips_and_parses_its_providers() -> None:
    doc = parse_document(_text())
    assert doc.providers == {"acme": ACME}
    assert doc.history == [ENTRY]
    assert doc.registry is not None
    assert doc.registry["acme"].scheme.name == "hmac-sha256"
    assert parse_document(dump_document(doc)) == doc


def test_an_empty_providers_object_is_authoritative() -> None:
    doc = parse_document(_text(providers={}))
    assert doc.registry is not None
    assert doc.registry.get("acme") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ("[]", 'keys "format"'),
        (json.dumps({"format": 1, "providers": None}), 'keys "format"'),
        (_text(format=2), "format 2"),
        (_text(format=True), "format True"),
        (_text(providers={"acme": {"scheme": "nope", "secrets": [{"value": "x"}]}}), "acme"),
        (_text(providers={"Bad Name": ACME}), "names match"),
        (_text(providers=[]), "maps provider names"),
        (
            _text(providers={"acme": {**ACME, "secrets": [{"value": "v" * 20, "expires_at": 5}]}}),
            "expires_at is an ISO 8601",
        ),
        (
            _text(
                providers={
                    "acme": {**ACME, "secrets": [{"value": "v" * 20, "added_at": "2026-12-02"}]}
                }
            ),
            "added_at is an ISO 8601",
        ),
        (_text(history={}), "history is a list"),
        (_text(history=[ENTRY] * (HISTORY_LIMIT + 1)), "history is a list"),
        (_text(history=[{**ENTRY, "action": "steal"}]), "action is one of"),
        (_text(history=[{**ENTRY, "at": "yesterday"}]), "at is an ISO 8601"),
        (_text(history=[{**ENTRY, "by": ""}]), "caller's ARN"),
        (_text(history=[{**ENTRY, "extra": 1}]), "exactly the keys"),
        (_text(history=[{**ENTRY, "change": {"secrets": [{"value": "s"}]}}]), "never holds"),
    ],
)
def test_anything_invalid_is_refused_with_a_clear_message(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_document(text)


def test_dump_refuses_an_invalid_document_instead_of_writing_it() -> None:
    bad = RegistryDocument({"acme": {**ACME, "secrets": []}}, [])
    with pytest.raises(ConfigurationError, match="secrets must be a non-empty list"):
        dump_document(bad)


def test_dump_refuses_a_document_secrets_manager_would_refuse() -> None:
    many = {f"p{i}": {**ACME, "public_url": f"https://{'x' * 60}.example/{i}"} for i in range(600)}
    with pytest.raises(ConfigurationError, match="over Secrets Manager"):
        dump_document(RegistryDocument(many, []))


def test_history_keeps_the_newest_entries() -> None:
    doc = RegistryDocument({}, [dict(ENTRY, provider=f"p{i}") for i in range(HISTORY_LIMIT)])
    changed = with_change(doc, {"acme": ACME}, dict(ENTRY, provider="last"))
    assert len(changed.history) == HISTORY_LIMIT
    assert changed.history[0]["provider"] == "p1"
    assert changed.history[-1]["provider"] == "last"
    assert parse_document(dump_document(changed)).providers == {"acme": ACME}


def test_an_expired_secret_no_longer_verifies() -> None:
    provider = providers.parse_config({"providers": {"acme": ACME}})["acme"]
    expiry = providers.utc_instant("2026-12-03T15:00:00Z", "expires_at")
    assert provider.secrets(expiry - 1) == [
        "new-secret-value-0123456789",
        "old-secret-value-0123456789",
    ]
    assert provider.secrets(expiry) == ["new-secret-value-0123456789"]


def test_a_provider_whose_every_secret_expired_refuses_every_delivery() -> None:
    spec = {**ACME, "secrets": [ACME["secrets"][1]]}
    provider = providers.parse_config({"providers": {"acme": spec}})["acme"]
    expiry = providers.utc_instant("2026-12-03T15:00:00Z", "expires_at")
    signed = providers.sign_delivery(provider, b"{}", timestamp=int(expiry) - 10)
    from webhook_inbox.ingest.schemes import Delivery

    delivery = Delivery({k.lower(): v for k, v in signed.headers.items()}, b"{}", "POST", "")
    assert provider.verify(delivery, now=int(expiry) - 10)
    with pytest.raises(AuthenticationFailed):
        provider.verify(delivery, now=int(expiry))


def test_the_module_names_its_constants() -> None:
    assert provider_registry.FORMAT == 1
    assert HISTORY_LIMIT == 100


def test_signing_uses_the_first_secret_alive_at_the_timestamp_and_says_when_none_is() -> None:
    spec = {**ACME, "secrets": [ACME["secrets"][1]]}
    provider = providers.parse_config({"providers": {"acme": spec}})["acme"]
    expiry = int(providers.utc_instant("2026-12-03T15:00:00Z", "expires_at"))
    assert providers.sign_delivery(provider, b"{}", timestamp=expiry - 10).headers
    with pytest.raises(ConfigurationError, match="every secret has expired"):
        providers.sign_delivery(provider, b"{}", timestamp=expiry)
