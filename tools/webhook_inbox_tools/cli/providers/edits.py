"""The changes ``providers add``, ``rotate`` and ``remove`` make to the registry's providers,
and what ``show`` may print of a secret (never its value).

Each change is a function of the current providers and the time, returning the new providers,
the history action, the provider's name and a description of what changed without any secret.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from webhook_inbox_tools.cli.providers.store import Change, Changed, Providers, iso, parse_iso
from webhook_inbox_tools.cli.providers.target import ProviderRefused


def fingerprint(value: str) -> str:
    """Enough to tell two secrets apart, or to match one you hold: never enough to find it."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:8]


def masked(secret: dict[str, Any]) -> dict[str, Any]:
    """One secret entry as ``show`` prints it: kind, where it lives, ages, a fingerprint."""
    shown: dict[str, Any] = {}
    if "value" in secret:
        shown = {"kind": "value", "fingerprint": fingerprint(secret["value"])}
    elif "secret_arn" in secret:
        shown = {"kind": "secret_arn", "secret_arn": secret["secret_arn"]}
        if "json_key" in secret:
            shown["json_key"] = secret["json_key"]
    elif "env" in secret:
        shown = {"kind": "env", "env": secret["env"]}
    for stamp in ("added_at", "expires_at"):
        if stamp in secret:
            shown[stamp] = secret[stamp]
    return shown


def masked_provider(provider: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: v for k, v in provider.items() if k != "secrets"},
        "secrets": [masked(s) for s in provider.get("secrets", [])],
    }


def add(name: str, settings: dict[str, Any], secret: str | None) -> Change:
    """A new provider with one secret (or public key, or pinned certificate), or none (a
    certificate scheme that downloads them); an existing name is refused."""

    def change(providers: Providers, now: datetime) -> Changed:
        if name in providers:
            raise ProviderRefused(
                f"provider {name!r} already exists: to replace its secret use "
                f"`webhook-inbox providers rotate {name} --secret-stdin`"
            )
        entries = [] if secret is None else [{"value": secret, "added_at": iso(now)}]
        provider = {**settings, "secrets": entries}
        what = {**settings, "secrets": [masked(entry) for entry in entries]}
        return {**providers, name: provider}, "add", name, what

    return change


def rotate(name: str, secret: str, keep_old_for: timedelta) -> Change:
    """The new secret first (it signs); the older ones expire after ``keep_old_for`` (at once
    for zero), never later than they already would."""

    def change(providers: Providers, now: datetime) -> Changed:
        provider = _existing(providers, name)
        entry = {"value": secret, "added_at": iso(now)}
        if any(s.get("value") == secret for s in provider["secrets"]):
            raise ProviderRefused(f"provider {name!r} already has this secret: nothing to rotate")
        expires = now + keep_old_for
        older = []
        if keep_old_for > timedelta(0):
            for old in provider["secrets"]:
                current = old.get("expires_at")
                until = min(parse_iso(current), expires) if current else expires
                older.append({**old, "expires_at": iso(until)})
        rotated = {**provider, "secrets": [entry, *older]}
        what = {
            "added": masked(entry),
            "old_expire_at": iso(expires) if older else None,
            "dropped": 0 if older else len(provider["secrets"]),
        }
        return {**providers, name: rotated}, "rotate", name, what

    return change


def remove(name: str) -> Change:
    def change(providers: Providers, now: datetime) -> Changed:
        provider = _existing(providers, name)
        rest = {k: v for k, v in providers.items() if k != name}
        return rest, "remove", name, {"scheme": provider.get("scheme")}

    return change


def _existing(providers: Providers, name: str) -> dict[str, Any]:
    if name not in providers:
        known = ", ".join(sorted(providers)) or "none"
        raise ProviderRefused(f"no provider {name!r} (configured: {known})")
    provider: dict[str, Any] = providers[name]
    return provider
