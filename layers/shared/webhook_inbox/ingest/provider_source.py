"""Where ingest finds its providers: the stack's providers registry secret, cached per execution
environment and re-read once the copy is ``PROVIDERS_REFRESH_S`` old, else ``PROVIDERS_CONFIG``.

One GetSecretValue per refresh interval (default 30 s) per execution environment and nothing
per delivery: a delivery to an unknown name is answered from the cached document (the 404 is the
negative cache), so a flood of made-up names cannot become AWS calls. The read is the only one
on the request that makes it, with one attempt of ingest's per-call timeouts
(:data:`aws.REGISTRY_REFRESH`).

When a read fails (Secrets Manager throttled, down or slow, or a document that fails
validation), the copy fails safe, in three steps by its age (the time since the last good read):

* younger than the refresh interval: served as usual (a read is not due yet);
* older (a re-read was due and failed): it still *accepts* what it verifies, but whatever it
  would refuse for not knowing a provider or a secret (404, 401) is answered 503 with
  ``Retry-After`` — the provider or secret may have been added since, and a sender retries a
  503 while GitHub, Slack or Shopify would drop or disable on a 4xx;
* ``PROVIDERS_MAX_AGE_S`` old or more (default 60 s): not used at all, every delivery is a 503,
  so a secret revoked or a provider removed stops verifying within that bound.

A cold environment with no copy answers 503 too. A failed read is retried after a short jittered
backoff (:func:`retry_delay`: about a second, doubling, never longer than the refresh interval),
so a Secrets Manager that is back serves at once, and a failing one sees a bounded number of
calls per environment.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from webhook_inbox import aws
from webhook_inbox.errors import ConfigurationError, ProvidersUnavailable
from webhook_inbox.ingest.provider_registry import INVALID_DOCUMENT, parse_document
from webhook_inbox.ingest.providers import Registry, registry_for

# Drive the refresh interval and the retry backoff; tests replace them to step time without
# sleeping and to pin the jitter.
clock: Callable[[], float] = time.monotonic
jitter: Callable[[], float] = random.random

# The first retry after a failed read waits 0.5-1 s; each further failure doubles it, up to
# the refresh interval.
FIRST_RETRY_S = 1.0


def retry_delay(failures: int, refresh_s: float) -> float:
    """How long to wait before the next read after ``failures`` consecutive failed ones: full
    exponential growth, half of it jittered, capped at the refresh interval."""
    ceiling = min(refresh_s, FIRST_RETRY_S * 2.0 ** min(failures - 1, 30))
    return ceiling * (0.5 + 0.5 * jitter())


@dataclass(frozen=True)
class Served:
    """The providers a delivery is checked against; when this delivery's read of the registry
    failed, the bounded reason code (for the ``providers_refresh_failed`` line); and, when the
    copy is older than the refresh interval because reads fail, its age (ingest then answers a
    refusal by it with a 503)."""

    registry: Registry
    refresh_failed: str | None = None
    stale_age_s: float | None = None


class RegistrySource:
    """The registry secret ``arn``, re-read when the copy is ``refresh_s`` old and never used
    once it is ``max_age_s`` old. ``fallback`` gives the ``PROVIDERS_CONFIG`` providers while
    the document says ``"providers": null``."""

    def __init__(
        self, arn: str, refresh_s: float, max_age_s: float, fallback: Callable[[], Registry]
    ) -> None:
        self._arn = arn
        self._refresh_s = refresh_s
        self._max_age_s = max_age_s
        self._fallback = fallback
        self._lock = threading.Lock()
        self._next_read_at = -math.inf
        self._loaded_at = -math.inf
        self._registry: Registry | None = None  # None once loaded: the fallback serves
        self._failures = 0
        self._last_failure = ""

    def current(self) -> Served:
        with self._lock:
            failed = None
            now = clock()
            if now >= self._next_read_at:
                failed = self._refresh(now)
            age = now - self._loaded_at
            if self._loaded_at == -math.inf:
                raise ProvidersUnavailable(
                    f"cannot read the providers registry: {self._last_failure}",
                    refresh_failed=failed,
                )
            if age >= self._max_age_s:
                raise ProvidersUnavailable(
                    f"the providers registry cannot be re-read ({self._last_failure}) and the "
                    f"copy is {age:.0f} s old, over the {self._max_age_s:.0f} s bound",
                    refresh_failed=failed,
                )
            registry = self._fallback() if self._registry is None else self._registry
            return Served(registry, failed, age if age >= self._refresh_s else None)

    def _refresh(self, now: float) -> str | None:
        """Read and validate the document; on failure keep what is loaded: the reason code."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            secrets = aws.client("secretsmanager", limits=aws.REGISTRY_REFRESH)
            text = secrets.get_secret_value(SecretId=self._arn)["SecretString"]
            document = parse_document(text)
        except (BotoCoreError, ClientError, KeyError) as exc:
            return self._failed(now, aws.error_code(exc))
        except ConfigurationError:
            return self._failed(now, INVALID_DOCUMENT)
        self._loaded_at, self._registry, self._failures = now, document.registry, 0
        self._next_read_at = now + self._refresh_s
        return None

    def _failed(self, now: float, reason: str) -> str:
        self._failures += 1
        self._last_failure = reason
        self._next_read_at = now + retry_delay(self._failures, self._refresh_s)
        return reason


_sources_lock = threading.Lock()
_sources: dict[tuple[str, float, float, str, str], RegistrySource] = {}


def serve(arn: str, refresh_s: float, max_age_s: float, inline: str, path: str) -> Served:
    """The providers for a delivery: from the registry ``arn`` when set (one source per
    execution environment), else from ``PROVIDERS_CONFIG`` / ``PROVIDERS_CONFIG_FILE``."""
    if not arn:
        return Served(registry_for(inline, path))
    with _sources_lock:
        key = (arn, refresh_s, max_age_s, inline, path)
        source = _sources.get(key)
        if source is None:
            source = RegistrySource(arn, refresh_s, max_age_s, lambda: registry_for(inline, path))
            _sources.clear()
            _sources[key] = source
    return source.current()


def reset() -> None:
    """Forget the cached document (tests; a new execution environment starts without one)."""
    with _sources_lock:
        _sources.clear()
