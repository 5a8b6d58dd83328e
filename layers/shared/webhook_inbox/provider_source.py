"""Where ingest finds its providers: the stack's providers registry secret, cached per execution
environment and re-read at most once per refresh interval, else ``PROVIDERS_CONFIG``.

One GetSecretValue per ``PROVIDERS_REFRESH_S`` (default 30 s) per execution environment and
nothing per delivery: a delivery to an unknown name is answered from the cached document (the
404 is the negative cache), so a flood of made-up names cannot become AWS calls. The read is the
only one on the request that makes it, with one attempt of ingest's per-call timeouts
(:data:`aws.REGISTRY_REFRESH`): a failed refresh costs nothing but a log line, because the last
good configuration keeps serving, and the next read is a refresh interval later (backing off
per interval, not per request). Without a last good configuration (a cold start while the
registry cannot be read) the delivery is a retriable 503, as for any secret that cannot be read,
and that 503 is what is counted (no ``providers_refresh_failed`` line: nothing is kept serving).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from webhook_inbox import aws
from webhook_inbox.errors import ConfigurationError, ProvidersUnavailable
from webhook_inbox.provider_registry import parse_document
from webhook_inbox.providers import Registry, registry_for

# Drives the refresh interval; tests replace it to step time without sleeping.
clock: Callable[[], float] = time.monotonic

# The reason code of a refresh whose document failed validation (AWS failures carry the
# service's error code or the exception class instead: aws.error_code).
INVALID_DOCUMENT = "invalid_document"


@dataclass(frozen=True)
class Served:
    """The providers a delivery is checked against and, when this delivery's refresh of the
    registry failed, the bounded reason code (for the ``providers_refresh_failed`` line)."""

    registry: Registry
    refresh_failed: str | None = None


class RegistrySource:
    """The registry secret ``arn``, re-read when the copy is ``refresh_s`` old. ``fallback``
    gives the ``PROVIDERS_CONFIG`` providers while the document says ``"providers": null``."""

    def __init__(self, arn: str, refresh_s: float, fallback: Callable[[], Registry]) -> None:
        self._arn = arn
        self._refresh_s = refresh_s
        self._fallback = fallback
        self._lock = threading.Lock()
        self._next_read_at = -math.inf
        self._loaded = False
        self._registry: Registry | None = None  # None with _loaded: the fallback serves
        self._last_failure = ""
        self.reads = 0  # GetSecretValue calls made (tests and the bench count them)

    def current(self) -> Served:
        with self._lock:
            failed = None
            now = clock()
            if now >= self._next_read_at:
                self._next_read_at = now + self._refresh_s
                failed = self._refresh()
            if not self._loaded:
                # The delivery's 503 is the signal (SecretUnavailable), not a refresh failure:
                # there is no configuration to keep serving.
                raise ProvidersUnavailable(
                    f"cannot read the providers registry: {self._last_failure}"
                )
            registry = self._fallback() if self._registry is None else self._registry
            return Served(registry, failed)

    def _refresh(self) -> str | None:
        """Read and validate the document; on failure keep what is loaded: the reason code."""
        from botocore.exceptions import BotoCoreError, ClientError

        self.reads += 1
        try:
            secrets = aws.client("secretsmanager", limits=aws.REGISTRY_REFRESH)
            text = secrets.get_secret_value(SecretId=self._arn)["SecretString"]
            document = parse_document(text)
        except (BotoCoreError, ClientError, KeyError) as exc:
            self._last_failure = aws.error_code(exc)
            return self._last_failure
        except ConfigurationError:
            self._last_failure = INVALID_DOCUMENT
            return INVALID_DOCUMENT
        self._loaded, self._registry = True, document.registry
        return None


_sources_lock = threading.Lock()
_sources: dict[tuple[str, float, str, str], RegistrySource] = {}


def serve(arn: str, refresh_s: float, inline: str, path: str) -> Served:
    """The providers for a delivery: from the registry ``arn`` when set (one source per
    execution environment), else from ``PROVIDERS_CONFIG`` / ``PROVIDERS_CONFIG_FILE``."""
    if not arn:
        return Served(registry_for(inline, path))
    with _sources_lock:
        key = (arn, refresh_s, inline, path)
        source = _sources.get(key)
        if source is None:
            source = RegistrySource(arn, refresh_s, lambda: registry_for(inline, path))
            _sources.clear()
            _sources[key] = source
    return source.current()


def source_for(arn: str) -> RegistrySource | None:
    """The execution environment's source for ``arn``, once a delivery has made it."""
    with _sources_lock:
        return next((s for key, s in _sources.items() if key[0] == arn), None)


def reset() -> None:
    """Forget the cached document (tests; a new execution environment starts without one)."""
    with _sources_lock:
        _sources.clear()
