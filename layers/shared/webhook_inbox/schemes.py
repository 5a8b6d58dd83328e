"""Signature schemes: how each provider signs a delivery and where its event id and type live.

Every scheme verifies the *raw* body bytes, decodes signature headers strictly, compares with
``hmac.compare_digest``, accepts any of several active secrets (rotation) and, when the scheme
carries a timestamp, enforces a tolerance in both directions. Every scheme can also *sign*, so
the CLI and the tests produce deliveries exactly as the provider would.

Verification failures raise :class:`AuthenticationFailed` whose detail is for logs only; its
``reason`` is ``signature`` (missing, malformed or wrong) or ``stale`` (authentic but outside the
tolerance window).

Where an id header is *not* covered by the signature (GitHub, Shopify, a generic sender that
signs only the body), the deduplication key is a digest of the event type and the signed body,
``sha256:<hex of type NUL body>``, and the header id is kept as ``delivery_id`` for information:
a replayer could change an unsigned id header at will, but not the signed bytes. The type is in
the key because providers send byte-identical bodies under different types (Shopify's
``orders/create`` and ``orders/paid`` for an order paid at checkout).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as _random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    InvalidPayload,
    SignatureMismatch,
)

Headers = Mapping[str, str]  # lower-cased names

MAX_SIGNATURE_HEADER_CHARS = 4096
MAX_SIGNATURES_PER_HEADER = 16
MAX_ID_CHARS = 255
MAX_TYPE_CHARS = 255
DEFAULT_TOLERANCE_S = 300

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_B64_SHA256 = re.compile(r"[A-Za-z0-9+/]{43}=")
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}")
_PLACEHOLDERS = ("id", "timestamp", "body")
_PLACEHOLDER = re.compile(r"\{(id|timestamp)\}")  # in the head; {body} is always last
_ANY_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
        raise _fail("timestamp is not unix seconds")
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


# --- schemes -----------------------------------------------------------------------------


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


class StandardWebhooks(Scheme):
    """Standard Webhooks and Svix: ``{id}.{timestamp}.{body}``, base64 key after ``whsec_``."""

    name = "standard-webhooks"
    option_names = frozenset({"header_prefix"})
    _PREFIXES = ("webhook", "svix")

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        prefix = self.options.get("header_prefix", "webhook")
        if prefix not in self._PREFIXES:
            raise ConfigurationError("standard-webhooks: header_prefix is 'webhook' or 'svix'")
        self.sign_prefix: str = prefix

    @staticmethod
    def key(secret: str) -> bytes:
        raw = secret.removeprefix("whsec_")
        try:
            # Secrets are configuration, not attacker input: tolerate missing padding.
            key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
        except binascii.Error:
            raise ConfigurationError("standard-webhooks: secret is not base64") from None
        if not key:
            raise ConfigurationError("standard-webhooks: empty secret")
        return key

    def check_secret(self, secret: str) -> None:
        self.key(secret)

    def _names(self, headers: Headers) -> str:
        # One family per request: never combine a webhook-id with a svix-signature.
        for prefix in self._PREFIXES:
            if f"{prefix}-id" in headers or f"{prefix}-signature" in headers:
                return prefix
        return "webhook"

    def verify(
        self, headers: Headers, body: bytes, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        prefix = self._names(headers)
        msg_id = _header(headers, f"{prefix}-id")
        timestamp_text = _header(headers, f"{prefix}-timestamp")
        timestamp = _timestamp(timestamp_text)
        entries = _header(headers, f"{prefix}-signature").split(" ")
        if len(entries) > MAX_SIGNATURES_PER_HEADER:
            raise _fail("too many signatures")
        presented = []
        for entry in entries:
            version, sep, value = entry.partition(",")
            if not sep:
                raise _fail("signature entry is not version,value")
            if version == "v1":  # other versions (v1a: asymmetric) are not ours to check
                presented.append(_b64_digest(value))
        if not presented:
            raise _fail("no v1 signature")
        signed_prefix = f"{msg_id}.{timestamp_text}.".encode()
        expected = [_mac(self.key(s), signed_prefix, body) for s in secrets]
        if not _any_match(expected, presented):
            raise SignatureMismatch("no v1 signature matched")
        _check_fresh(timestamp, now, tolerance)
        return Verified(signed_id=msg_id, timestamp=timestamp)

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        event_id: str | None,
        timestamp: int,
        event_type: str | None = None,
    ) -> dict[str, str]:
        msg_id = event_id or f"msg_{_random.token_urlsafe(18)}"
        mac = _mac(self.key(secret), f"{msg_id}.{timestamp}.".encode(), body)
        p = self.sign_prefix
        return {
            f"{p}-id": msg_id,
            f"{p}-timestamp": str(timestamp),
            f"{p}-signature": "v1," + base64.b64encode(mac).decode(),
        }

    def identify(
        self, headers: Headers, payload: Mapping[str, Any], verified: Verified, body: bytes
    ) -> Identity:
        return Identity(
            event_id=bounded_text(verified.signed_id, "webhook-id", MAX_ID_CHARS),
            event_type=bounded_text(payload.get("type"), "event type", MAX_TYPE_CHARS),
        )


class Stripe(Scheme):
    """Stripe: ``Stripe-Signature: t=…,v1=…``; HMAC-SHA256 hex of ``{t}.{body}``, key = UTF-8."""

    name = "stripe"

    def verify(
        self, headers: Headers, body: bytes, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        items = _header(headers, "stripe-signature").split(",")
        if len(items) > MAX_SIGNATURES_PER_HEADER + 2:
            raise _fail("too many signature items")
        timestamps: list[str] = []
        presented: list[bytes] = []
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                raise _fail("signature item is not key=value")
            if key == "t":
                timestamps.append(value)
            elif key == "v1":
                presented.append(_hex_digest(value))
            # v0 and future schemes are ignored, as Stripe's own library does.
        if len(timestamps) != 1:
            raise _fail("expected exactly one t=")
        timestamp = _timestamp(timestamps[0])
        if not presented:
            raise _fail("no v1 signature")
        expected = [_mac(s.encode(), f"{timestamps[0]}.".encode(), body) for s in secrets]
        if not _any_match(expected, presented):
            raise SignatureMismatch("no v1 signature matched")
        _check_fresh(timestamp, now, tolerance)
        return Verified(timestamp=timestamp)

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        event_id: str | None,
        timestamp: int,
        event_type: str | None = None,
    ) -> dict[str, str]:
        mac = _mac(secret.encode(), f"{timestamp}.".encode(), body)
        return {"Stripe-Signature": f"t={timestamp},v1={mac.hex()}"}

    def identify(
        self, headers: Headers, payload: Mapping[str, Any], verified: Verified, body: bytes
    ) -> Identity:
        return Identity(
            event_id=bounded_text(payload.get("id"), "event id", MAX_ID_CHARS),
            event_type=bounded_text(payload.get("type"), "event type", MAX_TYPE_CHARS),
        )


class GenericHmac(Scheme):
    """A configurable HMAC-SHA256 sender (the shape of most in-house webhooks).

    Options: ``signature_header`` (required), ``encoding`` (``hex`` | ``base64``), ``prefix``
    (e.g. ``sha256=``), ``timestamp_header``, ``id_header``, ``signed_content`` (a template over
    ``{id}``, ``{timestamp}`` and ``{body}``; ``{body}`` last; default ``{timestamp}.{body}``
    with a timestamp header, else ``{body}``), ``id_path`` (dotted path of the id in the body),
    ``type_path`` (default ``type``) or ``type_header``.

    The event id is the ``id_header`` value only when the template signs ``{id}``; otherwise the
    body's ``id_path``; otherwise the body digest (and the id header becomes ``delivery_id``).
    """

    name = "hmac-sha256"
    option_names = frozenset(
        {
            "signature_header",
            "encoding",
            "prefix",
            "timestamp_header",
            "id_header",
            "signed_content",
            "id_path",
            "type_path",
            "type_header",
        }
    )

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        opts = self.options
        for key, value in opts.items():
            if not isinstance(value, str):
                raise ConfigurationError(f"hmac-sha256: option {key} must be a string")
        if not opts.get("signature_header"):
            raise ConfigurationError("hmac-sha256: signature_header is required")
        self.signature_header: str = opts["signature_header"].lower()
        self.encoding: str = opts.get("encoding", "hex")
        if self.encoding not in {"hex", "base64"}:
            raise ConfigurationError("hmac-sha256: encoding is 'hex' or 'base64'")
        self.prefix: str = opts.get("prefix", "")
        self.timestamp_header: str | None = (opts.get("timestamp_header") or "").lower() or None
        self.id_header: str | None = (opts.get("id_header") or "").lower() or None
        default_template = "{timestamp}.{body}" if self.timestamp_header else "{body}"
        template: str = opts.get("signed_content", default_template)
        unknown = sorted(set(_ANY_PLACEHOLDER.findall(template)) - set(_PLACEHOLDERS))
        if unknown:
            raise ConfigurationError(
                f"hmac-sha256: unknown placeholder(s) {unknown} in signed_content; "
                "use {id}, {timestamp} and {body}"
            )
        if template.count("{body}") != 1 or not template.endswith("{body}"):
            raise ConfigurationError("hmac-sha256: signed_content must end with {body}")
        # Literal text and placeholder names alternate: [text, name, text, name, ..., text].
        self.head_pieces = _PLACEHOLDER.split(template.removesuffix("{body}"))
        if "{timestamp}" in template and not self.timestamp_header:
            raise ConfigurationError("hmac-sha256: {timestamp} needs timestamp_header")
        if self.timestamp_header and "{timestamp}" not in template:
            raise ConfigurationError("hmac-sha256: a timestamp_header must be signed")
        self.signs_id = "{id}" in template
        if self.signs_id and not self.id_header:
            raise ConfigurationError("hmac-sha256: {id} needs id_header")
        self.uses_timestamp = self.timestamp_header is not None
        self.id_path: str | None = opts.get("id_path")
        self.type_path: str = opts.get("type_path", "type")
        self.type_header: str | None = (opts.get("type_header") or "").lower() or None
        self._decode: Callable[[str], bytes] = (
            _hex_digest if self.encoding == "hex" else _b64_digest
        )

    def _head(self, msg_id: str, timestamp: str) -> bytes:
        """The signed content before the body, rendered in one left-to-right pass.

        Each placeholder is replaced by its value and a value is never scanned again: the id
        header is attacker-controlled, and re-reading ``{timestamp}`` inside it would let a
        captured signature verify under a new id (a new deduplication key).
        """
        values = {"id": msg_id, "timestamp": timestamp}
        # Odd positions of head_pieces are placeholder names, even positions literal text.
        rendered = (values[p] if i % 2 else p for i, p in enumerate(self.head_pieces))
        return "".join(rendered).encode()

    def verify(
        self, headers: Headers, body: bytes, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        value = _header(headers, self.signature_header)
        if not value.startswith(self.prefix):
            raise _fail(f"signature lacks the {self.prefix} prefix")
        presented = [self._decode(value.removeprefix(self.prefix))]
        timestamp_text = ""
        timestamp = None
        if self.timestamp_header:
            timestamp_text = _header(headers, self.timestamp_header)
            timestamp = _timestamp(timestamp_text)
        msg_id = _header(headers, self.id_header) if self.signs_id and self.id_header else ""
        head = self._head(msg_id, timestamp_text)
        if not _any_match([_mac(s.encode(), head, body) for s in secrets], presented):
            raise SignatureMismatch("signature did not match")
        if timestamp is not None:
            _check_fresh(timestamp, now, tolerance)
        return Verified(signed_id=msg_id or None, timestamp=timestamp)

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        event_id: str | None,
        timestamp: int,
        event_type: str | None = None,
    ) -> dict[str, str]:
        msg_id = event_id or (f"evt_{_random.token_urlsafe(12)}" if self.signs_id else "")
        mac = _mac(secret.encode(), self._head(msg_id, str(timestamp)), body)
        digest = mac.hex() if self.encoding == "hex" else base64.b64encode(mac).decode()
        # Sign with the header names as configured (case and all), as the sender would.
        opts = self.options
        headers = {opts["signature_header"]: self.prefix + digest}
        if self.timestamp_header:
            headers[opts["timestamp_header"]] = str(timestamp)
        if self.id_header and msg_id:
            headers[opts["id_header"]] = msg_id
        if self.type_header and event_type:
            headers[opts["type_header"]] = event_type
        return headers

    def identify(
        self, headers: Headers, payload: Mapping[str, Any], verified: Verified, body: bytes
    ) -> Identity:
        if self.type_header:
            raw_type = headers.get(self.type_header)
        else:
            raw_type = json_path(payload, self.type_path)
        event_type = bounded_text(raw_type, "event type", MAX_TYPE_CHARS)
        delivery_id = None
        if self.signs_id:
            event_id = bounded_text(verified.signed_id, "event id", MAX_ID_CHARS)
        elif self.id_path:
            event_id = bounded_text(json_path(payload, self.id_path), "event id", MAX_ID_CHARS)
        else:
            event_id = body_digest_id(event_type, body)
        if not self.signs_id and self.id_header:
            delivery_id = _optional_header(headers, self.id_header)
        return Identity(event_id=event_id, event_type=event_type, delivery_id=delivery_id)


class _Preset(GenericHmac):
    """A provider whose convention is one fixed configuration of :class:`GenericHmac`: the HMAC
    plumbing (prefix, encoding, signed content, freshness) is the generic scheme's; a preset
    only names its headers and says how the provider identifies its events."""

    preset: ClassVar[dict[str, str]]

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        if options:
            raise ConfigurationError(f"{self.name}: unknown option(s) {sorted(options)}")
        super().__init__(self.preset)


class GitHub(_Preset):
    """GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC of the body>``; no timestamp.

    ``X-GitHub-Delivery`` and ``X-GitHub-Event`` are not signed. The event type is
    ``X-GitHub-Event``, refined by the signed body's ``action`` when there is one
    (``issues.opened``); the deduplication key is the body digest.
    """

    name = "github"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Hub-Signature-256",
        "prefix": "sha256=",
        "id_header": "X-GitHub-Delivery",
        "type_header": "X-GitHub-Event",
    }

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        event_id: str | None,
        timestamp: int,
        event_type: str | None = None,
    ) -> dict[str, str]:
        # X-GitHub-Event carries the event without its action ("issues", not "issues.opened").
        event = event_type.split(".", 1)[0] if event_type else None
        return super().sign(secret, body, event_id=event_id, timestamp=timestamp, event_type=event)

    def identify(
        self, headers: Headers, payload: Mapping[str, Any], verified: Verified, body: bytes
    ) -> Identity:
        event = bounded_text(headers.get("x-github-event"), "X-GitHub-Event", MAX_TYPE_CHARS)
        action = payload.get("action")
        if isinstance(action, str) and action:
            event = bounded_text(f"{event}.{action}", "event type", MAX_TYPE_CHARS)
        return Identity(
            event_id=body_digest_id(event, body),
            event_type=event,
            delivery_id=_optional_header(headers, "x-github-delivery"),
        )


class Shopify(_Preset):
    """Shopify: ``X-Shopify-Hmac-Sha256`` = base64 HMAC of the body; topic and id unsigned."""

    name = "shopify"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Shopify-Hmac-Sha256",
        "encoding": "base64",
        "id_header": "X-Shopify-Webhook-Id",
        "type_header": "X-Shopify-Topic",
    }

    def identify(
        self, headers: Headers, payload: Mapping[str, Any], verified: Verified, body: bytes
    ) -> Identity:
        topic = bounded_text(headers.get("x-shopify-topic"), "X-Shopify-Topic", MAX_TYPE_CHARS)
        return Identity(
            event_id=body_digest_id(topic, body),
            event_type=topic,
            # Older Shopify documentation names the id header X-Shopify-Event-Id.
            delivery_id=_optional_header(headers, "x-shopify-webhook-id", "x-shopify-event-id"),
        )


class Slack(_Preset):
    """Slack: ``X-Slack-Signature: v0=<hex>`` over ``v0:{X-Slack-Request-Timestamp}:{body}``.

    Events API bodies only (JSON). ``url_verification`` is answered with its challenge and not
    stored; ``event_callback`` is keyed by the body's ``event_id``, typed by ``event.type``.
    """

    name = "slack"
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Slack-Signature",
        "prefix": "v0=",
        "timestamp_header": "X-Slack-Request-Timestamp",
        "signed_content": "v0:{timestamp}:{body}",
    }

    def identify(
        self, headers: Headers, payload: Mapping[str, Any], verified: Verified, body: bytes
    ) -> Identity:
        if payload.get("type") == "url_verification":
            challenge = bounded_text(payload.get("challenge"), "challenge", 1024)
            return Identity("", "url_verification", reply={"challenge": challenge})
        event = payload.get("event")
        inner_type = event.get("type") if isinstance(event, Mapping) else None
        return Identity(
            event_id=bounded_text(payload.get("event_id"), "event_id", MAX_ID_CHARS),
            event_type=bounded_text(inner_type or payload.get("type"), "event type", 255),
        )


SCHEMES: dict[str, type[Scheme]] = {
    cls.name: cls for cls in (StandardWebhooks, Stripe, GitHub, Shopify, Slack, GenericHmac)
}


def build(name: str, options: Mapping[str, Any] | None = None) -> Scheme:
    try:
        cls = SCHEMES[name]
    except KeyError:
        raise ConfigurationError(f"unknown scheme {name!r}; one of {sorted(SCHEMES)}") from None
    return cls(options)
