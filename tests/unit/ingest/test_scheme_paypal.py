"""PayPal (ingest/schemes/paypal.py) with certificates from a test CA. PayPal publishes no
library that verifies offline (its SDKs post the headers to its verify-webhook-signature API),
so deliveries here are signed by the documented algorithm: SHA256withRSA over
``transmission_id|transmission_time|webhook_id|crc32(body)``."""

from __future__ import annotations

import base64
import json
import time
import zlib
from collections.abc import Iterator

import pytest

from tests.cert_authority import PAYPAL_CERT_URL, leaf
from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    SenderUnavailable,
    SignatureMismatch,
)
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.schemes import Delivery, certificate_fetch, certificates, paypal

NOW = int(time.time())
PIN = leaf("messageverificationcerts.paypal.com").pin(PAYPAL_CERT_URL)
BODY = json.dumps({"id": "WH-1", "event_type": "PAYMENT.CAPTURE.COMPLETED"}).encode()


def scheme(**options: object) -> schemes.Scheme:
    return schemes.build("paypal", {"webhook_id": "8PT597110X687430LKGECATA", **options})


def headers(body: bytes = BODY) -> dict[str, str]:
    return scheme().sign(PIN, body, timestamp=NOW).headers


def verify(found: dict[str, str], body: bytes = BODY, secrets: list[str] | None = None) -> object:
    return scheme().verify(
        Delivery(found, body), [PIN] if secrets is None else secrets, now=NOW, tolerance=300
    )


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    calls: list[str] = []

    def refuse(url: str, *, what: str, budget_s: float = 0, cause: str = "") -> bytes:
        calls.append(url)
        raise SenderUnavailable(f"{what}: no network in unit tests", cause=cause or "fetch_failed")

    monkeypatch.setattr(certificate_fetch, "https_get", refuse)
    certificate_fetch.CACHE.clear()
    yield calls
    certificate_fetch.CACHE.clear()


def test_the_signed_string_is_the_documented_one() -> None:
    assert paypal.signed_string("t", "2026-01-01T00:00:00Z", "W", b"{}") == (
        f"t|2026-01-01T00:00:00Z|W|{zlib.crc32(b'{}')}".encode()
    )


def test_a_signed_delivery_verifies_and_is_keyed_by_the_body_id() -> None:
    signed = headers()
    verified = verify(signed)
    found = scheme().identify(Delivery(signed, BODY), json.loads(BODY), verified)  # type: ignore[arg-type]
    assert [(i.event_id, i.event_type) for i in found] == [("WH-1", "PAYMENT.CAPTURE.COMPLETED")]
    assert found[0].delivery_id == signed["PAYPAL-TRANSMISSION-ID"]


def test_another_webhook_id_or_body_fails() -> None:
    signed = headers()
    with pytest.raises(SignatureMismatch):
        schemes.build("paypal", {"webhook_id": "OTHER"}).verify(
            Delivery(signed, BODY), [PIN], now=NOW, tolerance=300
        )
    with pytest.raises(SignatureMismatch):
        verify(signed, BODY.replace(b"WH-1", b"WH-2"))


def test_a_body_with_the_same_crc32_verifies_the_documented_weakness() -> None:
    """CRC-32 is linear: four appended bytes give any body the original's CRC-32. Such a forged
    body verifies under the captured signature; docs/providers.md says so."""
    forged_prefix = BODY[:-1] + b',"id2":"x"}'
    target = zlib.crc32(BODY)
    # Solve for four trailing bytes (CRC-32 forcing): brute force over the last 4 bytes is too
    # slow, so use CRC-32's reversibility on a padded copy.
    forged = forge_crc32(forged_prefix, target)
    assert zlib.crc32(forged) == target
    assert verify(headers(), forged) is not None


def forge_crc32(data: bytes, target: int) -> bytes:
    """``data`` plus four bytes whose CRC-32 is ``target`` (the standard backwards computation)."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    reverse = {entry >> 24: index for index, entry in enumerate(table)}
    state = target ^ 0xFFFFFFFF
    indices = []
    for _ in range(4):
        index = reverse[state >> 24]
        indices.append(index)
        state = ((state ^ table[index]) << 8) & 0xFFFFFFFF
    crc = zlib.crc32(data) ^ 0xFFFFFFFF
    tail = bytearray()
    for index in reversed(indices):
        byte = (crc ^ index) & 0xFF
        tail.append(byte)
        crc = (crc >> 8) ^ table[index]
    return data + bytes(tail)


@pytest.mark.parametrize(
    "url",
    [
        "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-1",  # live provider
        "https://api.paypal.com.evil.example/v1/notifications/certs/CERT-1",
        "http://api.paypal.com/v1/notifications/certs/CERT-1",
        "https://api.paypal.com/v1/other/CERT-1",
        "https://evil.example/v1/notifications/certs/CERT-1",
    ],
)
def test_a_certificate_url_off_paypal_s_host_is_refused_unfetched(
    url: str, no_network: list[str]
) -> None:
    with pytest.raises(AuthenticationFailed):
        verify({**headers(), "PAYPAL-CERT-URL": url}, secrets=[])
    assert no_network == []


def test_sandbox_allows_only_the_sandbox_host(no_network: list[str]) -> None:
    sandbox = scheme(sandbox=True)
    url = "https://api.sandbox.paypal.com/v1/notifications/certs/CERT-1"
    with pytest.raises(SenderUnavailable):
        sandbox.verify(
            Delivery({**headers(), "PAYPAL-CERT-URL": url}, BODY), [], now=NOW, tolerance=300
        )
    assert no_network == [url]


def test_an_unpinned_certificate_is_503_in_pinned_mode() -> None:
    url = PAYPAL_CERT_URL.replace("0001", "0002")
    with pytest.raises(SenderUnavailable) as raised:
        scheme(certificates="pinned").verify(
            Delivery({**headers(), "PAYPAL-CERT-URL": url}, BODY), [PIN], now=NOW, tolerance=300
        )
    assert raised.value.cause == "not_pinned"


def test_a_stale_transmission_is_refused() -> None:
    with pytest.raises(AuthenticationFailed) as raised:
        scheme().verify(Delivery(headers(), BODY), [PIN], now=NOW + 301, tolerance=300)
    assert raised.value.reason == "stale"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PAYPAL-AUTH-ALGO", "SHA1withRSA"),
        ("PAYPAL-TRANSMISSION-SIG", "!!"),
        ("PAYPAL-TRANSMISSION-SIG", base64.b64encode(b"x" * 2000).decode()),
        ("PAYPAL-TRANSMISSION-TIME", "now"),
        ("PAYPAL-TRANSMISSION-ID", "a|b"),
        ("PAYPAL-CERT-URL", ""),
    ],
)
def test_malformed_headers_are_401(name: str, value: str) -> None:
    with pytest.raises(AuthenticationFailed):
        verify({**headers(), name: value})


def test_an_expired_certificate_is_refused() -> None:
    old = leaf("paypal-old", days_valid=1, starts_in_days=-400)
    signed = scheme().sign(old.pin(PAYPAL_CERT_URL), BODY, timestamp=NOW).headers
    with pytest.raises(AuthenticationFailed, match="not valid now"):
        verify(signed, secrets=[old.pin(PAYPAL_CERT_URL)])


@pytest.mark.parametrize("options", [{}, {"webhook_id": "a-b"}, {"webhook_id": "W", "sandbox": 1}])
def test_bad_options(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        schemes.build("paypal", options)


def test_the_certificate_comes_from_a_download_once(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[str] = []

    def download(url: str) -> bytes:
        served.append(url)
        der = certificates.first_certificate(
            leaf("messageverificationcerts.paypal.com").certificate_pem
        )
        assert der is not None
        return der

    monkeypatch.setattr(certificates, "download_certificate", download)
    for _ in range(2):
        verify(headers(), secrets=[])
    assert served == [PAYPAL_CERT_URL]
