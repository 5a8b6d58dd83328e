"""The keys a token sender signs with, by ``kid``: pinned in the providers registry, or (where
the sender publishes them without credentials: Google) downloaded from one allowed JWKS URL and
kept as long as its ``Cache-Control: max-age`` says.

A pin is a provider secret holding one JSON Web Key with its ``kid`` (what the sender publishes;
``webhook-inbox providers add NAME --scheme … --public-key-file jwk.json``). A development pin
also holds the private members, so ``webhook-inbox sign``/``trigger`` and the tests sign like the
sender. Pins are used first. With ``options.keys: pinned`` a ``kid`` nobody pinned answers 503
(``not_pinned``): the sender retries while the SenderUnavailable alarm pages an operator, who
checks and pins the new key.

Downloads (:mod:`.certificate_fetch`): HTTPS with the system's trust store, no redirect, 16 KiB,
2 s, IPv6 in the own network, counted against the execution environment's ten downloads a minute.
A key set is kept for its ``max-age`` (at least a minute, at most a day; an hour without one): only
a cold start, an expiry or an unknown ``kid`` downloads. An unknown ``kid`` refetches at most
every :data:`MIN_REFETCH_S` seconds per URL (a sender rotating publishes the new key before it
signs with it; made-up kids cannot cost a download each); a ``kid`` the fresh set lacks is a
forgery's (401). An expired set whose refresh fails
keeps serving for up to a day past its expiry (Google publishes a key long before and after it
signs with it); a first download that fails is a 503 (``fetch_failed``), remembered for 10 s.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, SenderUnavailable
from webhook_inbox.ingest.schemes import jose

FETCH = "fetch"
PINNED = "pinned"
MIN_MAX_AGE_S = 60
MAX_MAX_AGE_S = 86_400
DEFAULT_MAX_AGE_S = 3600
STALE_GRACE_S = 86_400
MIN_REFETCH_S = 30.0
FAILURE_MEMORY_S = 10.0
MAX_KEYS = 32
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?([0-9]{1,10})\"?\s*(?:,|$)", re.IGNORECASE)


def max_age(cache_control: str | None) -> int:
    """How long a key set may be kept, from its ``Cache-Control`` (bounded)."""
    match = _MAX_AGE.search(cache_control or "")
    seconds = int(match[1]) if match else DEFAULT_MAX_AGE_S
    return max(MIN_MAX_AGE_S, min(seconds, MAX_MAX_AGE_S))


def parse_key_set(body: bytes, what: str) -> dict[str, jose.Jwk]:
    """A JWKS document's usable keys by kid; keys of other types are skipped (a sender may
    publish more than we verify with), a document without one usable key is a 503."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise SenderUnavailable(f"{what}: not JSON", cause="fetch_failed") from None
    listed = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(listed, list) or not 0 < len(listed) <= MAX_KEYS:
        raise SenderUnavailable(f"{what}: not a JWKS document", cause="fetch_failed")
    keys: dict[str, jose.Jwk] = {}
    for entry in listed:
        try:
            key = jose.parse_jwk(entry, what)
        except ConfigurationError:
            continue
        if not key.private:  # a published set never holds one; ignore it if it did
            keys[key.kid] = key
    if not keys:
        raise SenderUnavailable(f"{what}: no usable key", cause="fetch_failed")
    return keys


def download_key_set(url: str) -> tuple[dict[str, jose.Jwk], int]:
    from webhook_inbox.ingest.schemes import certificate_fetch

    body, cache_control = certificate_fetch.https_get_response(url, what="key set download")
    return parse_key_set(body, "key set download"), max_age(cache_control)


@dataclass
class _Entry:
    keys: dict[str, jose.Jwk]
    expires: float  # monotonic
    fetched: float


class KeySetCache:
    """Key sets by URL (a scheme has one), with expiry, refetch on an unknown kid, failures
    remembered briefly; downloads counted against the shared per-minute budget."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sets: dict[str, _Entry] = {}
        self._failed: dict[str, tuple[float, SenderUnavailable]] = {}
        self.fetches = 0  # downloads attempted (tests read it)

    def key(
        self,
        url: str,
        kid: str,
        fetch: Callable[[str], tuple[dict[str, jose.Jwk], int]] = download_key_set,
    ) -> jose.Jwk | None:
        """The key ``kid`` of the set at ``url``: None when the set, fresh, lacks it."""
        now = time.monotonic()
        with self._lock:
            entry = self._sets.get(url)
            fresh = entry is not None and now < entry.expires
            if entry is not None and fresh and kid in entry.keys:
                return entry.keys[kid]
            if entry is not None and fresh and now - entry.fetched < MIN_REFETCH_S:
                return None  # an unknown kid, and the set was just fetched
            failed = self._failed.get(url)
            if failed is not None and now - failed[0] < FAILURE_MEMORY_S:
                return self._stale(entry, kid, now, failed[1])
            from webhook_inbox.ingest.schemes import certificate_fetch

            try:
                certificate_fetch.BUDGET.take(now)
            except SenderUnavailable as exc:
                return self._stale(entry, kid, now, exc)
            self.fetches += 1
        try:
            keys, seconds = fetch(url)
        except SenderUnavailable as exc:
            with self._lock:
                self._failed[url] = (time.monotonic(), exc)
                return self._stale(self._sets.get(url), kid, time.monotonic(), exc)
        with self._lock:
            self._failed.pop(url, None)
            done = time.monotonic()
            self._sets[url] = _Entry(keys, done + seconds, done)
            return keys.get(kid)

    @staticmethod
    def _stale(
        entry: _Entry | None, kid: str, now: float, error: SenderUnavailable
    ) -> jose.Jwk | None:
        """An expired set's key while its refresh fails (within the grace), else the error."""
        if entry is not None and now < entry.expires + STALE_GRACE_S:
            return entry.keys.get(kid)
        raise SenderUnavailable(f"{error} (remembered)", cause=error.cause)

    def clear(self) -> None:
        with self._lock:
            self._sets.clear()
            self._failed.clear()
            self.fetches = 0


CACHE = KeySetCache()


def pins(secrets: Sequence[str], what: str) -> dict[str, jose.Jwk]:
    return {key.kid: key for key in (jose.parse_jwk_text(s, what) for s in secrets)}


def key_for(
    kid: str, pinned: Mapping[str, jose.Jwk], *, mode: str, url: str | None, now: int
) -> jose.Jwk:
    """The key that verifies a token naming ``kid``: pinned, else downloaded (mode fetch); a kid
    nobody pinned or published is a 503 that pages (the sender retries; a new key to check)."""
    key = pinned.get(kid)
    if key is None and mode == FETCH and url is not None:
        key = CACHE.key(url, kid)
        if key is None:  # the sender publishes a key before it signs with it: a forgery's
            raise AuthenticationFailed(f"key {kid!r} is not in the sender's key set")
    if key is None:
        raise SenderUnavailable(
            f"the sender signs with key {kid!r}, which nobody pinned (a new key?): pin it with "
            "`webhook-inbox providers rotate NAME --public-key-file JWK`",
            cause="not_pinned",
        )
    if key.expires_at is not None and now > key.expires_at:
        raise AuthenticationFailed(f"key {kid!r} expired at {key.expires_at}")
    return key
