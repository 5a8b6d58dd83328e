"""The providers registry, judged once per sweeper run, whatever the traffic.

Ingest reads the registry only when deliveries arrive, so under light traffic a registry it
cannot read would page nobody (the providers-refresh-failed alarm needs failures in 2 of 3
minutes) and a provider left without a live secret would be noticed only when its sender gives
up. The sweeper runs every minute: it reads the registry the way ingest does (the document
validated whole) and reports

* a failed read, as ``ProvidersRefreshFailed`` (the same metric ingest's lines feed, so the
  same alarm pages, once, at any traffic), with the reason code in its line;
* the providers whose every secret has expired (they refuse every delivery), as the
  ``ProvidersWithoutLiveSecret`` gauge and their names in the line;
* a registry in use that holds no provider at all (wiped, or its last provider removed: every
  delivery is a 404), as the same gauge at 1 — the same page, for the same consequence: no
  delivery is accepted — and ``providers_registry_empty`` in the line;
* the providers with a live secret in Secrets Manager that cannot be read
  (:mod:`.secret_check`: each read at most once per five minutes), as ``SecretUnavailable``
  (what ingest's 503s for the same cause count: the secret-unavailable alarm) and
  ``provider_secrets_unreadable`` in the line, provider -> AWS error code.

Nothing is reported while all is well (a custom metric bills for every hour it receives a
value). The document read is kept for :data:`READ_EVERY_S` per execution environment and judged
again every run (a secret's expiry needs no read): one GetSecretValue every five minutes instead
of every minute, 8,640 a month rather than 43,200 (docs/costs.md's at-rest table), at the price
of noticing a registry that stopped being readable, or an edit, up to five minutes later. A read
that failed is never kept: once failing, every run reads and reports again, so the alarm (two
failed minutes in three) sees each minute.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook_inbox import aws
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest.provider_registry import INVALID_DOCUMENT, parse_document
from webhook_inbox.ingest.providers import registry_for
from webhook_inbox.maintenance import secret_check
from webhook_inbox.settings import RegistrySettings

# Ingest re-reads the registry every 30 s while it serves deliveries; the sweeper's check, which
# pages nobody before two failed minutes anyway, needs it no more often than its secrets' check.
READ_EVERY_S = secret_check.CHECK_EVERY_S


@dataclass(frozen=True)
class _Read:
    arn: str
    text: str
    read_at: float  # clock()


_last_read: list[_Read] = []  # the environment's last good read, at most one
clock: Callable[[], float] = time.monotonic  # replaced by tests


def reset_for_tests() -> None:
    _last_read.clear()


@dataclass(frozen=True)
class RegistryHealth:
    """What one read of the registry found: the failed read's reason code, or the providers
    that have no secret left that has not expired."""

    read_failed: str | None = None
    without_live_secret: tuple[str, ...] = ()
    empty: bool = False  # in use, with no provider: every delivery is refused
    # Provider -> the error of a live Secrets Manager secret of it that cannot be read.
    secrets_unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def secrets_unavailable(self) -> int:
        """The providers whose deliveries ingest answers 503 for want of a secret (a value
        without its json_key is ingest's 500, ingest-errors' page: named, not counted)."""
        return sum(code != secret_check.NO_JSON_KEY for code in self.secrets_unreadable.values())

    def as_log(self) -> dict[str, Any]:
        """The fields for the run's line: none while all is well."""
        fields: dict[str, Any] = {}
        if self.read_failed:
            fields["providers_refresh_failed"] = self.read_failed
        if self.without_live_secret:
            fields["providers_without_live_secret"] = list(self.without_live_secret)
        if self.empty:
            fields["providers_registry_empty"] = True
        if self.secrets_unreadable:
            fields["provider_secrets_unreadable"] = dict(sorted(self.secrets_unreadable.items()))
        return fields


def check_registry(
    configured: RegistrySettings, now: float, *, keep_going: Callable[[], bool] = lambda: True
) -> RegistryHealth:
    """Read the registry the settings name (or, while it is not in use, the ``PROVIDERS_CONFIG``
    it defers to) and judge it at ``now`` (epoch seconds), its providers' Secrets Manager
    secrets included while ``keep_going`` allows another call. No registry: nothing to check."""
    arn = configured.providers_registry_arn
    if not arn:
        return RegistryHealth()
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        document = parse_document(_registry_text(arn))
    except (BotoCoreError, ClientError, KeyError) as exc:
        return RegistryHealth(read_failed=aws.error_code(exc))
    except ConfigurationError:
        _last_read.clear()  # an invalid document is read again next run, and reported again
        return RegistryHealth(read_failed=INVALID_DOCUMENT)
    if document.registry is not None and not document.registry.providers:
        return RegistryHealth(empty=True)
    try:
        registry = document.registry
        if registry is None:  # not in use yet: PROVIDERS_CONFIG serves
            registry = registry_for(configured.providers_config, configured.providers_config_file)
    except ConfigurationError:
        # An invalid PROVIDERS_CONFIG is ingest's 500, which pages as ingest-errors.
        return RegistryHealth()
    dead = tuple(
        sorted(
            name
            for name, provider in registry.providers.items()
            if provider.scheme.requires_secrets
            and not any(ref.active(now) for ref in provider.secret_refs)
        )
    )
    unreadable = secret_check.unreadable(registry.providers.values(), now, keep_going=keep_going)
    return RegistryHealth(without_live_secret=dead, secrets_unreadable=unreadable)


def _registry_text(arn: str) -> str:
    """The registry's text: the environment's last read while it is younger than
    :data:`READ_EVERY_S`, else a new read (kept only once it succeeded)."""
    now = clock()
    if _last_read and _last_read[0].arn == arn and now - _last_read[0].read_at < READ_EVERY_S:
        return _last_read[0].text
    _last_read.clear()
    text: str = aws.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
    _last_read.append(_Read(arn, text, now))
    return text
