"""Certificates a sender names by URL (AWS SNS, PayPal): the URL checked against the scheme's
hosts, the certificate downloaded once and kept, or pinned in the providers registry.

A signed delivery names the certificate that verifies it (``SigningCertURL``,
``PAYPAL-CERT-URL``). The URL is judged by its host *before* anything is fetched: a URL off the
scheme's hosts is a forgery's (401). The download is HTTPS with the system's trust store (so the
certificate is as authentic as the TLS connection to the sender's own host), one GET without
redirects, at most 16 KiB, within 2 s all told, over IPv6 in the stack's own network
(:mod:`.certificate_fetch`). A certificate is kept per URL for the execution environment (a
sender rotates by publishing a new URL), 32 of them at most, so only a cold start or a new
certificate fetches. A failure is :class:`~webhook_inbox.errors.SenderUnavailable` (503 and a
page), remembered for 10 s so a burst of deliveries does not queue behind a dead host.

A *pin* is a provider's secret holding a certificate and the URL it was published at::

    url: https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem
    -----BEGIN CERTIFICATE-----
    ...
    -----END CERTIFICATE-----

(with a ``PRIVATE KEY`` block after it, a development pin also signs: ``webhook-inbox sign``,
``trigger`` and the tests). A pinned URL is never fetched; with ``certificates: pinned`` an
unpinned URL is refused with a 503, so the sender keeps retrying while an operator pins it.

``cryptography`` is imported on the first verification (as in :mod:`.public_keys`); pins are
checked at load by their shape only.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    SenderUnavailable,
    SignatureMismatch,
)
from webhook_inbox.ingest.schemes.base import Scheme

# RSA signatures up to 8192-bit keys; anything longer is not one.
MAX_SIGNATURE_BYTES = 1024
MAX_URL_CHARS = 500
FETCH = "fetch"
PINNED = "pinned"
MODES = (FETCH, PINNED)

_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----([A-Za-z0-9+/=\s]+)-----END CERTIFICATE-----"
)
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN (?:RSA )?PRIVATE KEY-----[A-Za-z0-9+/=\s]+-----END (?:RSA )?PRIVATE KEY-----"
)
_PIN_URL = re.compile(r"^url:[ \t]*(\S+)[ \t]*$", re.MULTILINE)
_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
# RFC 3339 with a zone (Z or an offset), seconds and an optional fraction.
_RFC3339 = re.compile(
    r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)", re.IGNORECASE
)


# --- URLs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UrlRule:
    """Where a scheme's certificates (or confirmations) may come from: HTTPS on a host the
    pattern matches in full, the default port, a path the pattern matches in full."""

    what: str
    host: re.Pattern[str]
    path: re.Pattern[str]
    query: bool = False  # whether a query string is allowed (SNS's SubscribeURL has one)


def checked_url(url: Any, rule: UrlRule) -> str:
    """``url`` if ``rule`` allows it, else a 401: a sender never names another host."""
    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        raise AuthenticationFailed(f"{rule.what} URL is missing or too long")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise AuthenticationFailed(f"{rule.what} URL is malformed") from None
    host = parts.hostname or ""
    if (
        parts.scheme != "https"
        or parts.username is not None
        or parts.password is not None
        or port not in (None, 443)
        or parts.netloc.lower() not in (host, f"{host}:443")
        or not rule.host.fullmatch(host)
        or not rule.path.fullmatch(parts.path)
        or (parts.query and not rule.query)
        or parts.fragment
        or url.endswith(("?", "#"))
    ):
        raise AuthenticationFailed(f"{rule.what} URL is not on an allowed host and path")
    return url


# --- pins ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """A certificate an operator vouched for, the URL the sender names it by, and (development
    only) its private key."""

    url: str
    certificate: bytes  # DER
    private_key: str | None = field(default=None, repr=False)


def pin_text(url: str, certificate_pem: str, private_key_pem: str | None = None) -> str:
    """A pin as the providers registry keeps it (the CLI's ``--pin-certificate``)."""
    blocks = [f"url: {url}", certificate_pem.strip()]
    if private_key_pem:
        blocks.append(private_key_pem.strip())
    return "\n".join(blocks) + "\n"


def first_certificate(text: str) -> bytes | None:
    """The DER of the first PEM certificate in ``text`` (a chain's leaf), None without one."""
    block = _PEM_CERTIFICATE.search(text)
    if block is None:
        return None
    try:
        der = base64.b64decode("".join(block[1].split()), validate=True)
    except binascii.Error:
        return None
    # A certificate is one DER SEQUENCE; the library judges the rest on first use.
    return der if der[:1] == b"\x30" else None


@functools.lru_cache(maxsize=64)
def parse_pin(text: str, rule: UrlRule) -> Pin:
    """A pin's URL (allowed by ``rule``), certificate and optional private key, by shape only."""
    url = _PIN_URL.search(text)
    der = first_certificate(text)
    if url is None or der is None:
        raise ConfigurationError(
            f"a pinned certificate is a 'url: {rule.what} URL' line and a PEM certificate"
        )
    try:
        checked_url(url[1], rule)
    except AuthenticationFailed:
        raise ConfigurationError(
            f"the pinned certificate's url is not a {rule.what} URL this scheme allows"
        ) from None
    key = _PEM_PRIVATE_KEY.search(text)
    return Pin(url[1], der, key[0] if key else None)


def pinned_for(url: str, pins: Sequence[Pin]) -> bytes | None:
    for pin in pins:
        if pin.url == url:
            return pin.certificate
    return None


# --- fetching and the cache -------------------------------------------------------------------


def download_certificate(url: str) -> bytes:
    """The DER of the certificate (the first, in a chain) that ``url`` serves."""
    from webhook_inbox.ingest.schemes import certificate_fetch

    body = certificate_fetch.https_get(url, what="certificate download")
    der = first_certificate(body.decode("ascii", errors="replace"))
    if der is None:
        raise SenderUnavailable("certificate download: not a PEM certificate", cause="fetch_failed")
    return der


def certificate_for(url: str, pins: Sequence[Pin], mode: str) -> bytes:
    """The certificate that verifies a delivery naming ``url`` (checked): the pinned one, else,
    unless the provider is pinned-only, the one downloaded from ``url`` (once)."""
    pinned = pinned_for(url, pins)
    if pinned is not None:
        return pinned
    if mode == PINNED:
        raise SenderUnavailable(
            "the sender names a certificate nobody pinned (a new one?): pin it with "
            "`webhook-inbox providers rotate NAME --pin-certificate FILE`",
            cause="not_pinned",
        )
    # Imported here: http.client and ssl cost a cold start that only a download needs (a
    # pinned-only provider never loads them).
    from webhook_inbox.ingest.schemes import certificate_fetch

    return certificate_fetch.CACHE.get(url, download_certificate)


class CertificateScheme(Scheme):
    """A scheme whose sender signs with a certificate it names by URL: ``options.certificates``
    is ``fetch`` (the default: download from the allowed hosts, pins used first) or ``pinned``
    (pins only); its secrets are pins (:func:`parse_pin`), optional when it fetches."""

    certificate_rule: UrlRule

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        mode = self.options.get("certificates", FETCH)
        if mode not in MODES:
            raise ConfigurationError(f"{self.name}: options.certificates is one of {list(MODES)}")
        self.mode: str = mode

    @property
    def requires_secrets(self) -> bool:
        return self.mode == PINNED

    def check_secret(self, secret: str) -> None:
        parse_pin(secret, self.certificate_rule)

    def pins(self, secrets: Sequence[str]) -> list[Pin]:
        return [parse_pin(secret, self.certificate_rule) for secret in secrets]

    def signing_pin(self, secret: str) -> tuple[Pin, str]:
        """The development pin that signs (``webhook-inbox sign``) and its private key."""
        pin = parse_pin(secret, self.certificate_rule)
        if pin.private_key is None:
            raise ConfigurationError(
                f"{self.name}: a pinned certificate only verifies; sign with a development pin "
                "that holds its private key (docs/providers.md)"
            )
        return pin, pin.private_key

    def verify_with_certificate(
        self,
        url: str,
        secrets: Sequence[str],
        message: bytes,
        signature: bytes,
        *,
        digest: str,
        now: int,
    ) -> None:
        """Verify ``signature`` with the certificate ``url`` names, or raise (401 / 503)."""
        der = certificate_for(url, self.pins(secrets), self.mode)
        if not verify_rsa(der, message, signature, digest=digest, now=now):
            raise SignatureMismatch("signature did not verify")


# --- verification (cryptography, imported here on first use) -----------------------------------


@functools.lru_cache(maxsize=64)
def _certificate(der: bytes) -> Any:
    from cryptography import x509

    return x509.load_der_x509_certificate(der)


def verify_rsa(der: bytes, message: bytes, signature: bytes, *, digest: str, now: int) -> bool:
    """Whether ``signature`` is the certificate's RSA PKCS#1 v1.5 signature of ``message`` with
    ``digest`` (``sha1`` or ``sha256``); a certificate that is not RSA, not valid at ``now`` or
    not a certificate at all is a 401."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    try:
        certificate = _certificate(der)
    except ValueError:
        raise AuthenticationFailed("the sender's certificate does not parse") from None
    when = datetime.fromtimestamp(now, tz=certificate.not_valid_after_utc.tzinfo)
    if not certificate.not_valid_before_utc <= when <= certificate.not_valid_after_utc:
        raise AuthenticationFailed("the sender's certificate is not valid now (expired?)")
    key = certificate.public_key()
    if not isinstance(key, rsa.RSAPublicKey):
        raise AuthenticationFailed("the sender's certificate does not hold an RSA key")
    algorithm = hashes.SHA1() if digest == "sha1" else hashes.SHA256()  # noqa: S303 - SNS v1
    try:
        key.verify(signature, message, padding.PKCS1v15(), algorithm)
    except InvalidSignature:
        return False
    return True


def sign_rsa(private_key_pem: str, message: bytes, *, digest: str) -> bytes:
    """A development pin's signature, as the sender would make it (tools and tests)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key = load_pem_private_key(private_key_pem.encode(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ConfigurationError("a pinned private key signs with RSA")
    algorithm = hashes.SHA1() if digest == "sha1" else hashes.SHA256()  # noqa: S303 - SNS v1
    signature: bytes = key.sign(message, padding.PKCS1v15(), algorithm)
    return signature


# --- small decoders the certificate schemes share ------------------------------------------------


def signature_bytes(text: Any, what: str) -> bytes:
    if not isinstance(text, str) or not text or len(text) > 2 * MAX_SIGNATURE_BYTES:
        raise AuthenticationFailed(f"{what} is missing or too long")
    if not _B64.fullmatch(text):
        raise AuthenticationFailed(f"{what} is not base64")
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise AuthenticationFailed(f"{what} is not base64") from None
    if not raw or len(raw) > MAX_SIGNATURE_BYTES:
        raise AuthenticationFailed(f"{what} is not an RSA signature")
    return raw


def rfc3339_seconds(text: Any, what: str) -> int:
    """Whole Unix seconds of an RFC 3339 time with a zone (the fraction dropped)."""
    match = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise AuthenticationFailed(f"{what} is not an RFC 3339 time")
    zone = "+00:00" if match[3].upper() == "Z" else match[3]
    try:
        return int(datetime.fromisoformat(match[1] + zone).timestamp())
    except ValueError:
        raise AuthenticationFailed(f"{what} is not an RFC 3339 time") from None
