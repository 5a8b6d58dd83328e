"""Public-key signatures: Ed25519 (Discord, Standard Webhooks ``v1a``) and ECDSA P-256 with
SHA-256 (SendGrid), for senders that sign with a private key and publish the public one.

``cryptography`` is imported on first use, never at module import: an HMAC-only deployment
never loads it (tests/unit/ingest/test_lazy_crypto.py checks in a fresh interpreter). Reading a
*public* key needs no import either, because both formats have a fixed shape: an Ed25519 key is
32 raw bytes (every 32 bytes load; a wrong key just fails to verify), and a P-256 key is one DER
SubjectPublicKeyInfo prefix and an uncompressed point, whose place on the curve is checked here
with integer arithmetic. So configuration load validates public keys completely and the library
is loaded by the first delivery that needs it. Private keys (accepted so ``webhook-inbox sign``
and the tests can sign like the provider) have their shape checked at load (:func:`check_pem`)
and are parsed by the library on first use, so a development configuration that holds them does
not load it either until one is used.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from webhook_inbox.errors import ConfigurationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

ED25519 = "ed25519"
P256 = "ecdsa-p256-sha256"

# DER SubjectPublicKeyInfo of an id-ecPublicKey on prime256v1, up to the BIT STRING's content:
# SEQUENCE { SEQUENCE { OID 1.2.840.10045.2.1, OID 1.2.840.10045.3.1.7 }, BIT STRING (66) }.
P256_SPKI_PREFIX = bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200")
# The P-256 curve y^2 = x^3 - 3x + b over GF(p) (SEC 2, section 2.4.2).
_P = 2**256 - 2**224 + 2**192 + 2**96 - 1
_B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
_WANTED = {ED25519: "an Ed25519", P256: "an ECDSA P-256"}
ED25519_SIGNATURE_BYTES = 64
# A DER ECDSA P-256 signature: SEQUENCE of two INTEGERs of at most 33 bytes each.
MAX_P256_SIGNATURE_BYTES = 72


@dataclass(frozen=True)
class PublicKey:
    """A verification key: Ed25519's 32 raw bytes, or P-256's DER SubjectPublicKeyInfo."""

    algorithm: str
    data: bytes


@dataclass(frozen=True)
class PrivateKey:
    """A signing key (development and tests: providers keep theirs) and its public half."""

    algorithm: str
    public: PublicKey
    key: Any = field(repr=False, compare=False)

    def sign(self, message: bytes) -> bytes:
        """An Ed25519 signature, or a DER ECDSA signature over SHA-256 of ``message``; both are
        deterministic (Ed25519 by design, ECDSA with RFC 6979 nonces)."""
        if self.algorithm == ED25519:
            signature: bytes = self.key.sign(message)
            return signature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        # RFC 6979 nonces: the same request signs the same way, like the other schemes.
        algorithm = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)
        der: bytes = self.key.sign(message, algorithm)
        return der


def ed25519_public(raw: bytes, what: str) -> PublicKey:
    if len(raw) != 32:
        raise ConfigurationError(f"{what} is not 32 bytes (an Ed25519 public key)")
    return PublicKey(ED25519, raw)


def p256_public(der: bytes, what: str) -> PublicKey:
    """A P-256 key from DER SubjectPublicKeyInfo with an uncompressed point on the curve."""
    point = der.removeprefix(P256_SPKI_PREFIX)
    if len(der) != 91 or len(point) != 65 or point[0] != 0x04:
        raise ConfigurationError(
            f"{what} is not an ECDSA P-256 public key (DER SubjectPublicKeyInfo, uncompressed)"
        )
    x, y = int.from_bytes(point[1:33], "big"), int.from_bytes(point[33:], "big")
    if x >= _P or y >= _P or (y * y - (x * x * x - 3 * x + _B)) % _P:
        raise ConfigurationError(f"{what}: the point is not on the P-256 curve")
    return PublicKey(P256, der)


# Unencrypted PKCS#8 ("PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY"); RFC 7468 allows explanatory
# text before the block.
_PEM_PRIVATE_KEY = re.compile(
    r"-----BEGIN ((?:EC )?PRIVATE KEY)-----([A-Za-z0-9+/=\s]+)-----END \1-----"
)
# The algorithm identifiers a private key of each kind carries in its DER: id-Ed25519
# (1.3.101.112), and the prime256v1 curve (1.2.840.10045.3.1.7) of an EC key.
_ALGORITHM_OIDS = {
    ED25519: bytes.fromhex("06032b6570"),
    P256: bytes.fromhex("06082a8648ce3d030107"),
}


def is_pem(text: str) -> bool:
    """Whether a configured key is PEM (RFC 7468 allows explanatory text before the block)."""
    return "-----BEGIN " in text


def check_pem(text: str, algorithm: str, what: str) -> None:
    """The shape of an unencrypted PEM private key of ``algorithm``, checked without the library
    (at configuration load); :func:`private_from_pem` parses it in full on first use."""
    block = _PEM_PRIVATE_KEY.search(text)
    try:
        der = base64.b64decode("".join(block[2].split()), validate=True) if block else b""
    except binascii.Error:
        der = b""
    if not der:
        raise ConfigurationError(f"{what} is not an unencrypted PEM private key")
    if _ALGORITHM_OIDS[algorithm] not in der:
        raise ConfigurationError(f"{what} is a PEM private key but not {_WANTED[algorithm]} one")


def ed25519_private_from_seed(seed: bytes, what: str) -> PrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    if len(seed) != 32:
        raise ConfigurationError(f"{what} is not a 32-byte Ed25519 seed")
    return _private(ed25519.Ed25519PrivateKey.from_private_bytes(seed))


def private_from_pem(text: str, algorithm: str, what: str) -> PrivateKey:
    """An unencrypted PEM private key (PKCS#8 ``BEGIN PRIVATE KEY``; SEC 1 for EC) of
    ``algorithm``: Ed25519, or ECDSA on P-256."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigurationError(f"{what} is not an unencrypted PEM private key") from None
    if algorithm == ED25519 and isinstance(key, ed25519.Ed25519PrivateKey):
        return _private(key)
    if (
        algorithm == P256
        and isinstance(key, ec.EllipticCurvePrivateKey)
        and isinstance(key.curve, ec.SECP256R1)
    ):
        return _private(key)
    raise ConfigurationError(f"{what} is a PEM private key but not {_WANTED[algorithm]} one")


def _private(key: Ed25519PrivateKey | EllipticCurvePrivateKey) -> PrivateKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    if isinstance(key, ed25519.Ed25519PrivateKey):
        return PrivateKey(ED25519, PublicKey(ED25519, key.public_key().public_bytes_raw()), key)
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return PrivateKey(P256, PublicKey(P256, der), key)


@functools.lru_cache(maxsize=64)
def _loaded(key: PublicKey) -> Any:
    """The library's key object, built once per key (cryptography is imported here)."""
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    if key.algorithm == ED25519:
        return ed25519.Ed25519PublicKey.from_public_bytes(key.data)
    return load_der_public_key(key.data)


def verified_index(
    keys: Sequence[PublicKey], message: bytes, signatures: Sequence[bytes]
) -> int | None:
    """The index of the first key under which any presented signature of ``message`` verifies.

    The public-key counterpart of ``base.match_index`` and, like it, the only place a public-key
    scheme decides: every (key, signature) pair is checked, without stopping at the first
    match. Nothing secret is compared (public keys, public signatures), so this is about one
    decision point and even work per request rather than a timing leak.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    found = None
    for index, key in enumerate(keys):
        loaded = _loaded(key)
        matched = False
        for signature in signatures:
            try:
                if key.algorithm == ED25519:
                    loaded.verify(signature, message)
                else:
                    loaded.verify(signature, message, ec.ECDSA(hashes.SHA256()))
            except InvalidSignature:
                continue
            matched = True
        if matched and found is None:
            found = index
    return found
