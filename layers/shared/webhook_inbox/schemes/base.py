"""What every scheme shares: strict decoding of signature material, the MAC, constant-time
matching over rotated secrets, timestamp tolerance, and the ``Scheme`` interface."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
)

Headers = Mapping[str, str]  # lower-cased names

MAX_SIGNATURE_HEADER_CHARS = 4096
MAX_SIGNATURES_PER_HEADER = 16
MAX_ID_CHARS = 255
MAX_TYPE_CHARS = 255
DEFAULT_TOLERANCE_S = 300

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_B64_SHA256 = re.compile(r"[A-Za-z0-9+/]{43}=")
# Canonical decimal only: no sign, no leading zero. The timestamp is signed as text, and with
# leading zeros a template without a separator ("{id}{timestamp}") would let a replayer move
# an id's trailing zeros into the timestamp: same signature, new deduplication key.
_UNIX_SECONDS = re.compile(r"0|[1-9][0-9]{0,11}")


@dataclass(frozen=True)
class Verified:
    """What a valid signature proved: the signed id (if the scheme signs one), the timestamp."""

    signed_id: str | None = None
    timestamp: int | None = None


@dataclass(frozen=True)
class Identity:
    """Where the event sits: the deduplication key, its type, the informational delivery id.

    ``reply`` short-circuits storage for protocol handshakes (Slack's url_verification): the
    handler answers 200 with it and stores nothing.
    """

    event_id: str
    event_type: str
    delivery_id: str | None = None
    reply: dict[str, Any] | None = None


# --- strict decoding helpers -------------------------------------------------------------


def _fail(detail: str) -> AuthenticationFailed:
    return AuthenticationFailed(detail, reason="signature")


def _header(headers: Headers, name: str) -> str:
    value = headers.get(name)
    if not value:
        raise _fail(f"missing header {name}")
    if len(value) > MAX_SIGNATURE_HEADER_CHARS:
        raise _fail(f"header {name} is too long")
    return value


def _hex_digest(text: str) -> bytes:
    if not _HEX64.fullmatch(text):
        raise _fail("signature is not 64 hex digits")
    return bytes.fromhex(text)


def _b64_digest(text: str) -> bytes:
    if not _B64_SHA256.fullmatch(text):
        raise _fail("signature is not a base64 SHA-256 digest")
    return base64.b64decode(text, validate=True)


def _timestamp(text: str) -> int:
    if not _UNIX_SECONDS.fullmatch(text):
        raise _fail("timestamp is not unix seconds in canonical form")
    return int(text)


def _check_fresh(timestamp: int, now: int, tolerance: int) -> None:
    # Both directions: a far-future timestamp is as suspicious as an old one.
    if abs(now - timestamp) > tolerance:
        raise AuthenticationFailed(
            f"timestamp {now - timestamp:+d}s from now, tolerance {tolerance}s", reason="stale"
        )


def _mac(key: bytes, *parts: bytes) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.digest()


def _any_match(expected: Sequence[bytes], presented: Sequence[bytes]) -> bool:
    # Compare every pair without short-circuiting on the secret list, so timing says nothing
    # about which secret (if any) matched.
    matched = False
    for want in expected:
        for got in presented:
            matched |= hmac.compare_digest(want, got)
    return matched


def body_digest_id(event_type: str, body: bytes) -> str:
    """The deduplication key for schemes whose id header is unsigned: type, NUL, signed body.

    A redelivery (same type, same bytes) is a duplicate; the same bytes under another type are
    another event. ``event_type`` has passed :func:`bounded_text`, which refuses NUL, so the
    separator cannot occur inside it and the encoding is unambiguous.
    """
    return "sha256:" + hashlib.sha256(event_type.encode() + b"\x00" + body).hexdigest()


def json_path(payload: Mapping[str, Any], path: str) -> Any:
    """Follow a dotted path (``data.object.id``) through nested objects; None when absent."""
    node: Any = payload
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def bounded_text(value: Any, what: str, limit: int) -> str:
    """A non-empty string (or integer id) of at most ``limit`` characters, else 400."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise InvalidPayload(f"{what} is missing or not a non-empty string")
    if len(value) > limit:
        raise InvalidPayload(f"{what} is longer than {limit} characters")
    return _storable(value, what)


def _storable(value: str, what: str) -> str:
    """``value`` if PostgreSQL text can hold it, else 400. Header values (unsigned ones too) may
    carry NUL or a lone surrogate, which would otherwise fail the INSERT with a 500 (found by
    fuzzing, tests/reliability/test_fuzz_ingest.py)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPayload(f"{what} holds a lone surrogate") from None
    if "\x00" in value:
        raise InvalidPayload(f"{what} holds NUL")
    return value


def _optional_header(headers: Headers, *names: str) -> str | None:
    for name in names:
        value = headers.get(name)
        if value:
            return _storable(value[:MAX_ID_CHARS], name)
    return None


# --- the interface ------------------------------------------------------------------------


class Scheme:
    """One provider signing convention. Subclasses set ``name`` and implement the four hooks."""

    name: ClassVar[str]
    # Whether deliveries carry a signed timestamp (and so a tolerance applies).
    uses_timestamp: bool = True
    option_names: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - self.option_names
        if unknown:
            raise ConfigurationError(f"{self.name}: unknown option(s) {sorted(unknown)}")
        self.options = options

    def check_secret(self, secret: str) -> None:
        """Reject a secret this scheme cannot use (at load time, not on the request path)."""
        if not secret:
            raise ConfigurationError(f"{self.name}: empty secret")

    def verify(
        self, headers: Headers, body: bytes, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        raise NotImplementedError

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        event_id: str | None,
        timestamp: int,
        event_type: str | None = None,
    ) -> dict[str, str]:
        raise NotImplementedError

    def identify(
        self, headers: Headers, payload: Mapping[str, Any], verified: Verified, body: bytes
    ) -> Identity:
        raise NotImplementedError
