"""The certificate download (ingest/schemes/certificate_fetch.py) against a real HTTPS server on
loopback whose certificate, for the SNS host, comes from a test CA: the connection is routed
there by replacing the one function that opens it, so no setting can do the same in production.
Bounded in size and in time; any failure is SenderUnavailable (503)."""

from __future__ import annotations

import http.server
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cert_authority import SNS_CERT_URL, authority_pem, leaf
from webhook_inbox.errors import SenderUnavailable
from webhook_inbox.ingest.schemes import certificate_fetch, certificates

HOST = "sns.us-east-1.amazonaws.com"
RELEASE = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path.startswith("/hang"):
            RELEASE.wait(10)  # until the test ends: the client must give up first
            return
        bodies = {
            "/SimpleNotificationService-test0001.pem": leaf().certificate_pem.encode(),
            "/big.pem": b"A" * (certificate_fetch.MAX_BODY_BYTES + 1),
            "/text.pem": b"hello",
        }
        body = bodies.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        if self.path != "/big.pem":  # the size bound must hold without a Content-Length too
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    served = leaf(HOST, dns_name=HOST)
    with tempfile.TemporaryDirectory() as folder:
        cert, key = Path(folder, "c.pem"), Path(folder, "k.pem")
        cert.write_text(served.certificate_pem)
        key.write_text(served.private_key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        yield httpd.server_address[1]
        RELEASE.set()
        httpd.shutdown()


@pytest.fixture
def routed(server: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Connections to the SNS host go to the loopback server, trusting only the test CA, through
    the own network's path (network.addresses names the address)."""
    trust = ssl.create_default_context(cadata=authority_pem().decode())

    def open_connection(host: str, timeout: float) -> certificate_fetch._HttpsConnection:
        return certificate_fetch._HttpsConnection(host, server, timeout=timeout, context=trust)

    monkeypatch.setattr(certificate_fetch, "_open_connection", open_connection)
    monkeypatch.setattr(certificate_fetch.network, "addresses", lambda host, port: ["127.0.0.1"])
    certificate_fetch.CACHE.clear()
    yield
    certificate_fetch.CACHE.clear()


def url(path: str) -> str:
    return f"https://{HOST}{path}"


def test_a_certificate_downloads_and_is_kept(routed: None) -> None:
    der = certificates.certificate_for(SNS_CERT_URL, [], certificates.FETCH)
    assert der == certificates.first_certificate(leaf().certificate_pem)
    assert certificates.certificate_for(SNS_CERT_URL, [], certificates.FETCH) == der
    assert certificate_fetch.CACHE.fetches == 1


@pytest.mark.parametrize("path", ["/big.pem", "/missing.pem", "/text.pem"])
def test_oversized_missing_or_not_a_certificate_is_unavailable(routed: None, path: str) -> None:
    with pytest.raises(SenderUnavailable) as raised:
        certificates.download_certificate(url(path))
    assert raised.value.cause == "fetch_failed"


def test_a_server_that_never_answers_is_cut_at_the_budget(routed: None) -> None:
    started = time.monotonic()
    with pytest.raises(SenderUnavailable):
        certificate_fetch.https_get(url("/hang.pem"), what="certificate download", budget_s=0.5)
    assert time.monotonic() - started < 3


def test_a_server_the_system_trust_store_does_not_know_is_refused(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the test CA (the system's trust store only), the TLS handshake fails: a
    certificate comes only from the sender's authenticated host."""
    real = certificate_fetch._open_connection

    def open_connection(host: str, timeout: float) -> certificate_fetch._HttpsConnection:
        conn = real(host, timeout)
        conn.port = server
        return conn  # type: ignore[return-value]

    monkeypatch.setattr(certificate_fetch, "_open_connection", open_connection)
    monkeypatch.setattr(certificate_fetch.network, "addresses", lambda host, port: ["127.0.0.1"])
    with pytest.raises(SenderUnavailable):
        certificate_fetch.https_get(SNS_CERT_URL, what="certificate download")


def test_the_cache_keeps_at_most_its_limit() -> None:
    cache = certificate_fetch.CertificateCache(limit=2)
    for n in range(3):
        cache.get(f"u{n}", lambda u: u.encode())
    cache.get("u0", lambda u: b"again")
    assert cache.fetches == 4  # u0 was dropped as the least recently used


def test_new_downloads_are_bounded_per_minute_cached_ones_are_not() -> None:
    """A stream of made-up certificate URLs on the sender's host costs at most ten downloads a
    minute; past that a new URL is refused without one, and a kept certificate still serves."""
    cache = certificate_fetch.CertificateCache()
    cache.get("kept", lambda u: b"der")
    for n in range(certificate_fetch.MAX_DOWNLOADS_PER_MINUTE - 1):
        with pytest.raises(SenderUnavailable):
            cache.get(f"made-up-{n}", _missing)
    with pytest.raises(SenderUnavailable, match="a minute"):
        cache.get("one-more", lambda u: pytest.fail("downloaded past the bound"))
    assert cache.get("kept", lambda u: pytest.fail("downloaded a kept one")) == b"der"
    assert cache.fetches == certificate_fetch.MAX_DOWNLOADS_PER_MINUTE


def _missing(url: str) -> bytes:
    raise SenderUnavailable("certificate download: HTTP 404", cause="fetch_failed")
