"""Compact JWS and JWT, parsed strictly and verified with ``cryptography`` (imported on the first
verification): RS256 (RSA PKCS#1 v1.5, SHA-256) and ES256 (ECDSA P-256, SHA-256, the signature
as raw ``r || s``), and the JSON Web Keys that verify them (RFC 7515, 7517, 7518, 7519).

Strict on purpose, because every lenient corner of JOSE has been an attack: each part is
base64url *without* padding and in canonical form (a token re-encodes to itself), the header is a
JSON object whose ``alg`` the *scheme* allows (never ``none``, never an HMAC ``HS*`` for a
public-key sender: an HS256 token "keyed" with a public key verifies under it in libraries that
let the token choose), a ``crit`` header is refused (we understand no extension), a key is used
only for the algorithm its type implies and, where the JWK names one, that ``alg``. Sizes are
bounded before anything is decoded. Reading a JWK needs no library (RSA: two integers; P-256:
the point checked on the curve by :mod:`.public_keys`), so configuration load stays lean.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError
from webhook_inbox.ingest.schemes import public_keys

RS256 = "RS256"
ES256 = "ES256"
MAX_KID_CHARS = 200
MAX_HEADER_BYTES = 16 * 1024  # Apple's header carries a three-certificate x5c (about 4 KiB)
MIN_RSA_BITS = 2048
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_KID = re.compile(r"[\x21-\x7e]{1,200}")  # printable ASCII: kids are compared, logged, stored
_KTY_OF_ALG = {RS256: "RSA", ES256: "EC"}


@dataclass(frozen=True)
class Jws:
    """One compact JWS as received: its decoded header and payload, the bytes it signs."""

    header: Mapping[str, Any]
    payload: bytes = field(repr=False)
    signing_input: bytes = field(repr=False)
    signature: bytes = field(repr=False)

    @property
    def kid(self) -> str:
        kid = self.header.get("kid")
        if not isinstance(kid, str) or not _KID.fullmatch(kid):
            raise AuthenticationFailed("the token's kid is missing or malformed")
        return kid

    def claims(self) -> dict[str, Any]:
        """The payload as a JSON object (a JWT's claims), else a 401."""
        try:
            document = json.loads(self.payload)
        except (ValueError, RecursionError):
            raise AuthenticationFailed("the token's payload is not JSON") from None
        if not isinstance(document, dict):
            raise AuthenticationFailed("the token's payload is not a JSON object")
        return document


def b64url_decode(text: str, what: str) -> bytes:
    """Unpadded base64url in canonical form (the last character's unused bits zero), else 401:
    two spellings of one token would be two deduplication keys for a digest-keyed scheme."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise AuthenticationFailed(f"{what} is not unpadded base64url")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise AuthenticationFailed(f"{what} is not unpadded base64url") from None
    if b64url_encode(raw) != text:
        raise AuthenticationFailed(f"{what} is not canonical base64url")
    return raw


def b64url_encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def parse_compact(token: Any, what: str, *, max_chars: int, algorithms: frozenset[str]) -> Jws:
    """``token`` as a compact JWS whose ``alg`` is one of ``algorithms``, else a 401."""
    if not isinstance(token, str) or not token:
        raise AuthenticationFailed(f"{what} is missing")
    if len(token) > max_chars:
        raise AuthenticationFailed(f"{what} is longer than {max_chars} characters")
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthenticationFailed(f"{what} is not a compact JWS (three parts)")
    encoded_header, encoded_payload, encoded_signature = parts
    if len(encoded_header) > MAX_HEADER_BYTES * 4 // 3 + 4:
        raise AuthenticationFailed(f"{what}'s header is too long")
    raw_header = b64url_decode(encoded_header, f"{what}'s header")
    try:
        header = json.loads(raw_header)
    except (ValueError, RecursionError):
        raise AuthenticationFailed(f"{what}'s header is not JSON") from None
    if not isinstance(header, dict):
        raise AuthenticationFailed(f"{what}'s header is not a JSON object")
    algorithm = header.get("alg")
    if algorithm not in algorithms:  # "none", HS256 and anything unexpected
        raise AuthenticationFailed(f"{what}'s alg is not one of {sorted(algorithms)}")
    if "crit" in header:
        raise AuthenticationFailed(f"{what} names critical extensions this verifier lacks")
    signature = b64url_decode(encoded_signature, f"{what}'s signature")
    if algorithm == ES256 and len(signature) != 64:
        raise AuthenticationFailed(f"{what}'s ES256 signature is not 64 bytes (r || s)")
    if algorithm == RS256 and not 0 < len(signature) <= 1024:
        raise AuthenticationFailed(f"{what}'s RS256 signature has an impossible length")
    payload = b64url_decode(encoded_payload, f"{what}'s payload")
    signing_input = f"{encoded_header}.{encoded_payload}".encode("ascii")
    return Jws(header, payload, signing_input, signature)


# --- keys --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Jwk:
    """A public verification key from a JWK: ``data`` is RSA's ``(n, e)`` or P-256's DER
    SubjectPublicKeyInfo. ``private`` is a development key's JWK members (``sign`` uses them)."""

    kid: str
    algorithm: str  # RS256 or ES256
    data: Any
    expires_at: int | None = None  # Plaid's expired_at: the key verifies nothing after it
    private: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)


def _int_member(jwk: Mapping[str, Any], name: str, what: str) -> int:
    text = jwk.get(name)
    if not isinstance(text, str) or not text:
        raise ConfigurationError(f"{what}: member {name!r} is missing")
    try:
        raw = b64url_decode(text, f"{what} {name}")
    except AuthenticationFailed:
        raise ConfigurationError(f"{what}: member {name!r} is not base64url") from None
    return int.from_bytes(raw, "big")


def parse_jwk(jwk: Any, what: str) -> Jwk:
    """A JWK (a JSON object) as a :class:`Jwk`, checked completely without the library."""
    if not isinstance(jwk, Mapping):
        raise ConfigurationError(f"{what} is not a JSON Web Key (a JSON object)")
    kid = jwk.get("kid")
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise ConfigurationError(f"{what} has no kid (1-{MAX_KID_CHARS} printable characters)")
    kty = jwk.get("kty")
    algorithm = RS256 if kty == "RSA" else ES256 if kty == "EC" else None
    if algorithm is None:
        raise ConfigurationError(f"{what}: kty is RSA or EC")
    named = jwk.get("alg")
    if named is not None and named != algorithm:
        raise ConfigurationError(f"{what}: alg {named!r} is not {algorithm} (kty {kty})")
    if jwk.get("use", "sig") != "sig":
        raise ConfigurationError(f"{what}: use is not sig")
    data: Any
    if algorithm == RS256:
        n, e = _int_member(jwk, "n", what), _int_member(jwk, "e", what)
        if n.bit_length() < MIN_RSA_BITS or e < 3 or e % 2 == 0:
            raise ConfigurationError(f"{what}: not an RSA key of at least {MIN_RSA_BITS} bits")
        data = (n, e)
        private_names: tuple[str, ...] = ("d", "p", "q", "dp", "dq", "qi")
    else:
        if jwk.get("crv") != "P-256":
            raise ConfigurationError(f"{what}: crv is not P-256")
        x, y = (_int_member(jwk, name, what) for name in ("x", "y"))
        if x.bit_length() > 256 or y.bit_length() > 256:
            raise ConfigurationError(f"{what}: not a P-256 point")
        point = b"\x04" + x.to_bytes(32, "big") + y.to_bytes(32, "big")
        data = public_keys.p256_public(public_keys.P256_SPKI_PREFIX + point, what).data
        private_names = ("d",)
    expires = jwk.get("expired_at")
    if expires is not None and (not isinstance(expires, int) or isinstance(expires, bool)):
        raise ConfigurationError(f"{what}: expired_at is unix seconds or null")
    private = tuple((n, jwk[n]) for n in private_names if isinstance(jwk.get(n), str))
    if private and len(private) != len(private_names):
        raise ConfigurationError(f"{what}: a private JWK needs {', '.join(private_names)}")
    return Jwk(kid, algorithm, data, expires, private)


def parse_jwk_text(text: str, what: str) -> Jwk:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        raise ConfigurationError(f"{what} is not a JSON Web Key (JSON)") from None
    return parse_jwk(document, what)


def public_jwk(key: Jwk) -> dict[str, Any]:
    """A key as its public JWK (what a sender publishes)."""
    if key.algorithm == RS256:
        n, e = key.data
        numbers = {"n": _b64_int(n), "e": _b64_int(e)}
        return {"kty": "RSA", "alg": RS256, "use": "sig", "kid": key.kid, **numbers}
    point = key.data[-64:]
    xy = {"x": b64url_encode(point[:32]), "y": b64url_encode(point[32:])}
    return {"kty": "EC", "crv": "P-256", "alg": ES256, "use": "sig", "kid": key.kid, **xy}


def _b64_int(value: int) -> str:
    return b64url_encode(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@functools.lru_cache(maxsize=64)
def _loaded(key: Jwk) -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    if key.algorithm == RS256:
        n, e = key.data
        return rsa.RSAPublicNumbers(e, n).public_key()
    return load_der_public_key(key.data)


def verify(jws: Jws, key: Jwk) -> bool:
    """Whether ``jws`` verifies under ``key``; the token's alg must be the key's."""
    if jws.header.get("alg") != key.algorithm:
        return False
    return verify_with(_loaded(key), key.algorithm, jws)


def verify_with(public_key: Any, algorithm: str, jws: Jws) -> bool:
    """Whether ``jws`` verifies under a ``cryptography`` public key (an x5c leaf's)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    try:
        if algorithm == RS256 and isinstance(public_key, rsa.RSAPublicKey):
            public_key.verify(jws.signature, jws.signing_input, padding.PKCS1v15(), hashes.SHA256())
            return True
        if (
            algorithm == ES256
            and isinstance(public_key, ec.EllipticCurvePublicKey)
            and isinstance(public_key.curve, ec.SECP256R1)
        ):
            r = int.from_bytes(jws.signature[:32], "big")
            s = int.from_bytes(jws.signature[32:], "big")
            der = encode_dss_signature(r, s)
            public_key.verify(der, jws.signing_input, ec.ECDSA(hashes.SHA256()))
            return True
    except InvalidSignature:
        return False
    return False


# --- claims ------------------------------------------------------------------------------


def numeric_date(claims: Mapping[str, Any], name: str) -> int:
    """A NumericDate claim in whole seconds (the fraction dropped), required."""
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 2**40:
        raise AuthenticationFailed(f"the token's {name} is missing or not a NumericDate")
    return int(value)


def check_lifetime(claims: Mapping[str, Any], *, now: int, leeway: int) -> int:
    """``exp`` (required) not passed, ``iat`` (required) and ``nbf`` not in the future, each
    with ``leeway`` seconds for clock skew; returns ``iat``."""
    expires, issued = numeric_date(claims, "exp"), numeric_date(claims, "iat")
    not_before = numeric_date(claims, "nbf") if "nbf" in claims else None
    if now - leeway >= expires:
        raise AuthenticationFailed(f"the token expired {now - expires}s ago", reason="stale")
    if issued > now + leeway or (not_before is not None and not_before > now + leeway):
        raise AuthenticationFailed("the token is not valid yet (iat or nbf ahead)", reason="stale")
    return issued


# --- signing (development keys: tools and tests) -------------------------------------------


def sign(
    key: Jwk, claims: Mapping[str, Any] | bytes, header: Mapping[str, Any] | None = None
) -> str:
    """A compact JWS of ``claims`` (a JSON object, or the payload's bytes) signed with a
    development JWK's private members, ``kid`` in the header."""
    if not key.private:
        raise ConfigurationError(f"key {key.kid!r} only verifies: sign with a private JWK")
    head = {"alg": key.algorithm, "kid": key.kid, "typ": "JWT", **(header or {})}
    payload = claims if isinstance(claims, bytes) else json.dumps(claims).encode()
    encoded = f"{b64url_encode(json.dumps(head).encode())}.{b64url_encode(payload)}"
    return f"{encoded}.{b64url_encode(sign_bytes(_private_key(key), key.algorithm, encoded))}"


def sign_bytes(private_key: Any, algorithm: str, signing_input: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    data = signing_input.encode("ascii")
    if algorithm == RS256:
        signature: bytes = private_key.sign(data, padding.PKCS1v15(), hashes.SHA256())
        return signature
    r, s = decode_dss_signature(private_key.sign(data, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def _private_key(key: Jwk) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    members = {name: _int_member(dict(key.private), name, key.kid) for name, _ in key.private}
    if key.algorithm == RS256:
        n, e = key.data
        return rsa.RSAPrivateNumbers(
            members["p"], members["q"], members["d"], members["dp"], members["dq"],
            members["qi"], rsa.RSAPublicNumbers(e, n),
        ).private_key()  # fmt: skip
    return ec.derive_private_key(members["d"], ec.SECP256R1())


def private_jwk(private_key: Any, kid: str) -> dict[str, Any]:
    """A ``cryptography`` RSA or P-256 private key as a private JWK (tests, dev keys)."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if isinstance(private_key, rsa.RSAPrivateKey):
        numbers = private_key.private_numbers()
        n, e = numbers.public_numbers.n, numbers.public_numbers.e
        public = {"kty": "RSA", "alg": RS256, "use": "sig", "kid": kid,
                  "n": _b64_int(n), "e": _b64_int(e)}  # fmt: skip
        private = {"d": numbers.d, "p": numbers.p, "q": numbers.q, "dp": numbers.dmp1,
                   "dq": numbers.dmq1, "qi": numbers.iqmp}  # fmt: skip
        return public | {name: _b64_int(value) for name, value in private.items()}
    numbers = private_key.private_numbers()
    point = numbers.public_numbers
    return {
        "kty": "EC", "crv": "P-256", "alg": ES256, "use": "sig", "kid": kid,
        "x": b64url_encode(point.x.to_bytes(32, "big")),
        "y": b64url_encode(point.y.to_bytes(32, "big")),
        "d": b64url_encode(numbers.private_value.to_bytes(32, "big")),
    }  # fmt: skip
