"""Reading and writing the providers registry secret: one validated document, written whole.

Every write is read → change → validate the whole new document → PutSecretValue → check that
nobody wrote in between (the version read must now be AWSPREVIOUS). An invalid document is
refused before anything is written, so ingest never sees a half-applied change. The first write
to a registry that is not managed yet imports the stack's ``ProvidersConfig`` first, so the
providers it served are kept.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest.provider_registry import (
    RegistryDocument,
    dump_document,
    parse_document,
    with_change,
)
from webhook_inbox_tools.cli.providers.target import ProviderRefused, ProvidersError, Target

Providers = dict[str, Any]


def iso(moment: datetime) -> str:
    """The registry's timestamps: ISO 8601 in UTC with a Z, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Snapshot:
    """The registry as read: its document and the secret version it came from."""

    arn: str
    version_id: str
    document: RegistryDocument


@dataclass(frozen=True)
class Written:
    """What a write did: the new document, whether it imported ProvidersConfig first, and
    whether another writer got in between (then ours replaced theirs, which may be lost)."""

    document: RegistryDocument
    imported: bool
    raced: bool


def read(target: Target) -> Snapshot:
    arn = target.registry_arn()
    reply = target.secretsmanager.get_secret_value(SecretId=arn)
    try:
        document = parse_document(reply["SecretString"])
    except ConfigurationError as exc:
        raise ProvidersError(f"the registry {arn} is not valid: {exc}") from None
    return Snapshot(arn, reply["VersionId"], document)


def caller_arn(target: Target) -> str:
    return str(target.sts.get_caller_identity()["Arn"])


def history_entry(
    by: str, action: str, provider: str, change: dict[str, Any], *, now: datetime
) -> dict[str, Any]:
    return {"at": iso(now), "by": by, "action": action, "provider": provider, "change": change}


def prune_expired(providers: Providers, now: datetime) -> Providers:
    """The providers without secrets whose ``expires_at`` has passed (ingest ignores them).

    A provider whose every secret has expired keeps them: pruned to none, it would make the
    whole document invalid, and every write (of any provider) would be refused until someone
    found it. Kept, it stays visible (``providers list`` flags it) and refuses every delivery
    until it is rotated or removed."""
    kept: Providers = {}
    for name, provider in providers.items():
        live = [s for s in provider.get("secrets", []) if not expired(s, now)]
        kept[name] = {**provider, "secrets": live} if live else provider
    return kept


def expired(secret: dict[str, Any], now: datetime) -> bool:
    expires = secret.get("expires_at")
    return expires is not None and parse_iso(expires) <= now


def without_live_secret(providers: Providers, now: datetime) -> list[str]:
    """The providers whose every secret has expired: ingest refuses all their deliveries (not
    a certificate scheme's without any, which downloads its sender's certificates)."""
    from webhook_inbox.ingest import schemes

    def needs_secrets(provider: Any) -> bool:
        if provider.get("secrets"):
            return True
        return schemes.build(provider["scheme"], provider.get("options")).requires_secrets

    return sorted(
        name
        for name, provider in providers.items()
        if all(expired(s, now) for s in provider.get("secrets", [])) and needs_secrets(provider)
    )


def imported_entries(target: Target, by: str, now: datetime) -> tuple[Providers, list[Any]]:
    """ProvidersConfig's providers, and one history entry per provider taken over from it."""
    providers = copy.deepcopy(target.deployed_config())
    entries = [
        history_entry(
            by,
            "import",
            name,
            {"from": "ProvidersConfig", "scheme": provider.get("scheme")},
            now=now,
        )
        for name, provider in sorted(providers.items())
    ]
    return providers, entries


# A change: the new providers, the history action, the provider's name, what changed.
Changed = tuple[Providers, str, str, dict[str, Any]]
Change = Callable[[Providers, datetime], Changed]


def write(target: Target, change: Change, *, import_only: bool = False) -> Written:
    """Apply ``change`` (providers, now → new providers, action, provider, what changed) to the
    registry, importing ProvidersConfig first when the registry is not managed yet."""
    snapshot = read(target)
    now = datetime.now(UTC)
    by = caller_arn(target)
    entries: list[Any] = []
    current = snapshot.document.providers
    imported = current is None
    if current is None:
        current, entries = imported_entries(target, by, now)
    elif import_only:
        raise ProviderRefused(
            f"the registry of {target.label} is already managed by `webhook-inbox providers` "
            "(ProvidersConfig is ignored): nothing to import"
        )
    if not import_only:
        current, action, name, what = change(prune_expired(current, now), now)
        entries.append(history_entry(by, action, name, what, now=now))
    document = with_change(snapshot.document, current, *entries)
    try:
        text = dump_document(document)  # validates the whole document: refused before writing
    except ConfigurationError as exc:
        raise ProvidersError(f"refused, nothing was written: {exc}") from None
    target.secretsmanager.put_secret_value(SecretId=snapshot.arn, SecretString=text)
    return Written(document, imported, not _was_replaced(target, snapshot))


def _was_replaced(target: Target, snapshot: Snapshot) -> bool:
    """True when the version this command read is now AWSPREVIOUS, i.e. ours came right after
    it. Otherwise someone else wrote between our read and our write."""
    stages = target.secretsmanager.describe_secret(SecretId=snapshot.arn).get(
        "VersionIdsToStages", {}
    )
    return "AWSPREVIOUS" in stages.get(snapshot.version_id, [])
