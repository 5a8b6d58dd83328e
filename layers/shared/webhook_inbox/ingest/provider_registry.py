"""The providers registry: the stack's providers in one Secrets Manager secret, changed without
a deploy (``webhook-inbox providers …``) and read by ingest on a short refresh.

The secret's string is one JSON document::

    {"format": 1,
     "providers": null | {NAME: <a provider, exactly as in PROVIDERS_CONFIG's "providers">},
     "history": [{"at": "2026-12-02T15:00:00Z", "by": "<caller ARN>",
                  "action": "import" | "add" | "rotate" | "remove",
                  "provider": NAME, "change": {…}}]}

``"providers": null`` means the registry is not in use yet: ingest serves ``PROVIDERS_CONFIG`` /
``PROVIDERS_CONFIG_FILE`` as before. An object (even ``{}``) makes the registry authoritative and
``PROVIDERS_CONFIG`` is ignored, so a removed provider is really gone. ``history`` is the audit
trail, oldest first, at most :data:`HISTORY_LIMIT` entries; a change never carries a secret (no
``"value"`` key at any depth). The document is itself a secret, encrypted with the stack's key,
which is why new secrets may sit in it inline (``{"value": …, "added_at": …}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest.providers import PROVIDER_NAME, Registry, parse_config, utc_instant

FORMAT = 1
HISTORY_LIMIT = 100
ACTIONS = frozenset({"import", "add", "rotate", "remove"})
# Secrets Manager refuses a secret string over 64 KiB: refuse it here, with a clearer message.
MAX_DOCUMENT_BYTES = 65_536
# The reason code of a read whose document failed validation (AWS failures carry the service's
# error code or the exception class instead: aws.error_code).
INVALID_DOCUMENT = "invalid_document"
# What the template (and the dev stack) create: constant, so a later deploy never overwrites it.
INITIAL_TEXT = '{"format": 1, "providers": null, "history": []}'

_DOCUMENT_KEYS = frozenset({"format", "providers", "history"})
_HISTORY_KEYS = frozenset({"at", "by", "action", "provider", "change"})


@dataclass(frozen=True)
class RegistryDocument:
    """A validated registry document. ``registry`` is the parsed form of ``providers`` (None
    while the registry is not in use)."""

    providers: dict[str, Any] | None
    history: list[dict[str, Any]]
    registry: Registry | None = field(default=None, compare=False, repr=False)


def parse_document(text: str) -> RegistryDocument:
    """The document in ``text``, validated whole (format, every provider as ingest validates
    it, expiry times, history): anything else raises :class:`ConfigurationError`."""
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise ConfigurationError(f"providers registry is not JSON: {exc}") from None
    try:
        # JSON escapes can spell text Secrets Manager cannot hold (a lone surrogate, \ud800).
        json.dumps(raw, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(
            "providers registry holds text that is not valid Unicode"
        ) from None
    if not isinstance(raw, Mapping) or set(raw) != _DOCUMENT_KEYS:
        raise ConfigurationError(
            'providers registry is an object with keys "format", "providers", "history"'
        )
    if type(raw["format"]) is not int or raw["format"] != FORMAT:
        raise ConfigurationError(f"providers registry format {raw['format']!r} is not {FORMAT}")
    providers = raw["providers"]
    registry = None
    if providers is not None:
        try:
            registry = parse_config({"providers": providers})
        except ConfigurationError as exc:
            raise ConfigurationError(f"providers registry: {exc}") from None
    history = raw["history"]
    if not isinstance(history, list) or len(history) > HISTORY_LIMIT:
        raise ConfigurationError(f"providers registry history is a list of ≤ {HISTORY_LIMIT}")
    for index, entry in enumerate(history):
        _check_history_entry(entry, f"providers registry history[{index}]")
    return RegistryDocument(
        None if providers is None else dict(providers), [dict(e) for e in history], registry
    )


def _check_history_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, Mapping) or set(entry) != _HISTORY_KEYS:
        raise ConfigurationError(f"{where} has exactly the keys {sorted(_HISTORY_KEYS)}")
    utc_instant(entry["at"], f"{where}.at")
    if not isinstance(entry["by"], str) or not entry["by"]:
        raise ConfigurationError(f"{where}.by is the caller's ARN")
    if not isinstance(entry["action"], str) or entry["action"] not in ACTIONS:
        raise ConfigurationError(f"{where}.action is one of {sorted(ACTIONS)}")
    if not isinstance(entry["provider"], str) or not PROVIDER_NAME.fullmatch(entry["provider"]):
        raise ConfigurationError(f"{where}.provider is a provider name")
    if not isinstance(entry["change"], Mapping):
        raise ConfigurationError(f"{where}.change is an object")
    if _carries_a_value(entry["change"]):
        raise ConfigurationError(f'{where}.change carries a "value": history never holds a secret')


def _carries_a_value(node: Any) -> bool:
    if isinstance(node, Mapping):
        return "value" in node or any(_carries_a_value(v) for v in node.values())
    if isinstance(node, list):
        return any(_carries_a_value(v) for v in node)
    return False


def dump_document(doc: RegistryDocument) -> str:
    """The secret string for ``doc``: re-parsed before it is returned, so what a command writes
    is always a document ingest accepts (never a half-valid one)."""
    text = json.dumps(
        {"format": FORMAT, "providers": doc.providers, "history": doc.history},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    if len(text.encode("utf-8")) > MAX_DOCUMENT_BYTES:
        raise ConfigurationError(
            f"providers registry would be over Secrets Manager's {MAX_DOCUMENT_BYTES} bytes"
        )
    parse_document(text)
    return text


def with_change(
    doc: RegistryDocument, providers: dict[str, Any], *entries: dict[str, Any]
) -> RegistryDocument:
    """``doc`` with ``providers`` and ``entries`` appended to its history (the oldest entries
    dropped beyond :data:`HISTORY_LIMIT`). Not validated here: :func:`dump_document` does."""
    history = [*doc.history, *entries][-HISTORY_LIMIT:]
    return RegistryDocument(providers, history)
