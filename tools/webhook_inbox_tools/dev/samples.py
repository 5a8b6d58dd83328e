"""One signed sample delivery per configured provider family, from the sample files that
``webhook-inbox trigger`` sends (:mod:`webhook_inbox_tools.sample_events`).

A sample must work as printed: accepted by ingest and, where a handler is registered for the
provider, processed by it (the first sample type with a handler is chosen: the bodies carry the
fields the example handlers read). A provider without handlers gets its family's default
event, which the processor marks ``ignored``.
"""

from __future__ import annotations

import shlex
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import providers
from webhook_inbox.processing.domain import Handler
from webhook_inbox_tools import sample_events
from webhook_inbox_tools.cli.signing import curl_command, destination
from webhook_inbox_tools.dev.env_file import cli_name


@dataclass(frozen=True)
class Sample:
    provider: str
    scheme: str
    event_type: str
    outcome: str  # what the pipeline will do with it (without a curl: why there is none)
    curl: str | None  # None: the configuration holds no key that signs (public keys only)


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


def sample_deliveries(
    registry: providers.Registry, base_url: str, providers_file: Path | None = None
) -> list[Sample]:
    now = int(time.time())
    handlers = application_handlers()
    samples = []
    for provider in _representatives(registry, handlers):
        handled = [event_type for name, event_type in handlers if name == provider.name]
        event_type = sample_events.preferred_type(provider, handled)
        if event_type is None:
            continue  # a scheme without a sample file: nothing to print
        built = sample_events.build(provider, event_type, now=now)
        target = f"{base_url}/webhooks/{provider.name}"
        try:
            signed = providers.sign_delivery(
                provider,
                built.body,
                event_id=built.event_id,
                timestamp=now,
                event_type=event_type,
                url=target,
            )
        except ConfigurationError as exc:
            # Public keys only verify. The stack serves the provider all the same; the sender
            # (or `trigger` / `sign` with --signing-key-file) signs.
            why = f"{exc}; with the private key in KEY: " + _trigger_command(
                provider.name, event_type, providers_file
            )
            samples.append(Sample(provider.name, provider.scheme.name, event_type, why, None))
            continue
        handler = handlers.get((provider.name, event_type))
        outcome = f"processed by {handler.__name__}" if handler else "no handler: ignored"
        url = destination(provider, target, signed)
        curl = curl_command(url, signed.headers, signed.body, None)
        samples.append(Sample(provider.name, provider.scheme.name, event_type, outcome, curl))
    return samples


def _trigger_command(provider: str, event_type: str, providers_file: Path | None) -> str:
    """The command that signs with a private key, runnable as printed from dev's folder (it
    finds the stack from the env file dev wrote; --providers for any other folder)."""
    words = ["trigger", provider, event_type, "--signing-key-file", "KEY"]
    if providers_file is not None:
        words += ["--providers", str(providers_file)]
    return f"{cli_name()} {shlex.join(words)}"
