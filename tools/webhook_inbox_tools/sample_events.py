"""Realistic deliveries of a chosen event type, built from the data files in ``samples/``.

One file per signature scheme lists the event types it can build (those the example handlers
and the docs name) with a body shaped as that provider documents it; placeholders give every
delivery fresh ids and timestamps (``samples/README.md``). ``webhook-inbox trigger`` sends
them and ``webhook-inbox dev`` prints one per provider family.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import providers

SAMPLES_DIR = Path(__file__).with_name("samples")
_PLACEHOLDER = re.compile(r"\{([a-z_0-9]+(?:#[0-9]+)?)\}")
_NUMERIC = {"now", "now_ms", "int"}  # a string that is only one of these becomes a number


@dataclass(frozen=True)
class EventSample:
    event_type: str
    body: Any  # the template: placeholders still in its strings
    id_template: str | None
    endpoint: str | None  # Discord: the endpoint kind that sends this type
    # The payload field that orders two events about the same object (dotted path), where the
    # sender has one: what `check-handlers` bumps to make an older and a newer event.
    version: str | None = None


@dataclass(frozen=True)
class Catalog:
    scheme: str
    default: str
    events: Mapping[str, EventSample]


@dataclass(frozen=True)
class Override:
    path: tuple[str, ...]
    value: Any

    @property
    def field(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class SampleDelivery:
    """A body ready to sign, and what to sign it with."""

    event_type: str
    event_id: str | None
    body: bytes


@cache
def catalog(scheme: str) -> Catalog | None:
    path = SAMPLES_DIR / f"{scheme}.json"
    if not path.is_file():
        return None
    document = json.loads(path.read_text("utf-8"))
    events = {
        name: EventSample(
            name, entry["body"], entry.get("id"), entry.get("endpoint"), entry.get("version")
        )
        for name, entry in document["events"].items()
    }
    return Catalog(document["scheme"], document["default"], events)


def event_types(provider: providers.Provider) -> list[str]:
    """The event types ``trigger`` can build for ``provider``, in the file's order."""
    found = catalog(provider.scheme.name)
    if found is None:
        return []
    endpoint = provider.scheme.options.get("endpoint", "interactions")
    return [
        sample.event_type
        for sample in found.events.values()
        if sample.endpoint is None or sample.endpoint == endpoint
    ]


def preferred_type(provider: providers.Provider, handled: Sequence[str]) -> str | None:
    """The type dev prints a sample of: the first with a handler, else the file's default."""
    types = event_types(provider)
    for event_type in types:
        if event_type in handled:
            return event_type
    found = catalog(provider.scheme.name)
    if found is not None and found.default in types:
        return found.default
    return types[0] if types else None


def parse_override(text: str) -> Override:
    """``field.path=value``: the value as JSON when it parses (numbers, true, null, objects),
    else as a string."""
    path, equals, raw = text.partition("=")
    keys = tuple(path.split("."))
    if not equals or not path or any(not key for key in keys):
        raise ConfigurationError(
            f"--override {text!r}: expected FIELD=VALUE, FIELD a dotted path (data.object.id=cus_1)"
        )
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return Override(keys, value)


def apply_override(document: Any, override: Override) -> None:
    """Set ``override``'s field in ``document``, creating missing objects on the way; a number
    indexes an array (``0.email`` in a batch)."""
    node = document
    *parents, leaf = override.path
    for depth, key in enumerate(parents):
        child = _child(node, key, override)
        if child is None:
            child = {}
            _set(node, key, child, override)
        if not isinstance(child, dict | list):
            where = ".".join(override.path[: depth + 1])
            raise ConfigurationError(
                f"--override {override.field}: {where} is {type(child).__name__}, not an object"
            )
        node = child
    _set(node, leaf, override.value, override)


def _child(node: Any, key: str, override: Override) -> Any:
    if isinstance(node, list):
        return node[_index(node, key, override)]
    return node.get(key)


def _set(node: Any, key: str, value: Any, override: Override) -> None:
    if isinstance(node, list):
        node[_index(node, key, override)] = value
    else:
        node[key] = value


def _index(node: list[Any], key: str, override: Override) -> int:
    if not key.isdigit() or int(key) >= len(node):
        raise ConfigurationError(
            f"--override {override.field}: {key!r} is not an index of an array of {len(node)}"
        )
    return int(key)


class _Values:
    """A delivery's placeholder values, made on first use: one per name, so that an id and a
    reference to it agree (``{number#2}`` is a second, independent number)."""

    def __init__(self, now: int, event_id: str = "") -> None:
        self.now = now
        self.known: dict[str, str] = {"event_id": event_id}

    def __getitem__(self, key: str) -> str:
        if key not in self.known:
            name, _, copy = key.partition("#")
            if name == "int":  # the number, as a JSON number
                self.known[key] = self[f"number#{copy}" if copy else "number"]
            else:
                self.known[key] = self._fresh(name)
        return self.known[key]

    def _fresh(self, name: str) -> str:
        now = self.now
        makers = {
            "uid": lambda: uuid.uuid4().hex[:12],
            "uuid": lambda: str(uuid.uuid4()),
            "hex32": lambda: uuid.uuid4().hex,
            "hex40": lambda: uuid.uuid4().hex + uuid.uuid4().hex[:8],
            "number": lambda: str(secrets.randbelow(9 * 10**8) + 10**8),
            "now": lambda: str(now),
            "now_ms": lambda: str(now * 1000),
            "iso": lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "iso_ms": lambda: time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now)),
        }
        maker = makers.get(name)
        if maker is None:
            raise KeyError(name)
        return maker()


def _render(template: Any, values: _Values) -> Any:
    if isinstance(template, dict):
        return {key: _render(value, values) for key, value in template.items()}
    if isinstance(template, list):
        return [_render(value, values) for value in template]
    if isinstance(template, str):
        whole = _PLACEHOLDER.fullmatch(template)
        if whole and whole[1].partition("#")[0] in _NUMERIC:
            return int(values[whole[1]])
        return _PLACEHOLDER.sub(lambda m: _substitute(m, values), template)
    return template


def _substitute(match: re.Match[str], values: _Values) -> str:
    try:
        return values[match[1]]
    except KeyError:
        return match[0]  # not a placeholder: text in braces stays as it is


def build(
    provider: providers.Provider,
    event_type: str,
    *,
    now: int,
    overrides: Sequence[Override] = (),
) -> SampleDelivery:
    """A fresh delivery body of ``event_type`` for ``provider`` (unsigned)."""
    found = catalog(provider.scheme.name)
    if event_type not in event_types(provider) or found is None:
        known = ", ".join(event_types(provider)) or "none"
        raise ConfigurationError(
            f"no sample {event_type!r} for {provider.name} ({provider.scheme.name}); "
            f"it has: {known} (webhook-inbox trigger --list)"
        )
    sample = found.events[event_type]
    values = _Values(now)
    event_id = _render(sample.id_template, values) if sample.id_template else None
    values.known["event_id"] = event_id or ""
    document = _render(sample.body, values)
    if provider.scheme.name == "hmac-sha256":
        _place_generic(document, provider.scheme.options, event_id or "", event_type)
    for override in overrides:
        apply_override(document, override)
    if provider.scheme.body_format == "form":
        body = urlencode(document).encode()
    else:
        body = json.dumps(document, separators=(",", ":")).encode()
    return SampleDelivery(event_type, event_id, body)


def _place_generic(
    document: dict[str, Any], options: Mapping[str, Any], event_id: str, event_type: str
) -> None:
    """A generic HMAC sender's id and type go where its configuration reads them."""
    if options.get("id_path"):
        apply_override(document, Override(tuple(options["id_path"].split(".")), event_id))
    if not options.get("type_header"):
        path = options.get("type_path", "type")
        apply_override(document, Override(tuple(path.split(".")), event_type))
