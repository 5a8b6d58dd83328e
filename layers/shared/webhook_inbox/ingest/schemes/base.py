"""What every scheme shares: strict decoding of signature material, the MAC, constant-time
matching over rotated secrets, timestamp tolerance, and the ``Scheme`` interface."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
# The digests some senders still sign with (Intercom, Vercel: HMAC-SHA1), by digest size.
_HEX_OF_SIZE = {32: _HEX64, 20: re.compile(r"[0-9a-fA-F]{40}")}
_B64_OF_SIZE = {32: _B64_SHA256, 20: re.compile(r"[A-Za-z0-9+/]{27}=")}
DIGEST_SIZES = {"sha256": 32, "sha1": 20}
# Canonical decimal only: no sign, no leading zero. The timestamp is signed as text, and with
# leading zeros a template without a separator ("{id}{timestamp}") would let a replayer move
# an id's trailing zeros into the timestamp: same signature, new deduplication key.
_UNIX_SECONDS = re.compile(r"0|[1-9][0-9]{0,11}")


@dataclass(frozen=True)
class Delivery:
    """One HTTP request as the sender made it: what every scheme verifies and identifies.

    ``headers`` are looked up by lower-cased name (the constructor lower-cases them: API Gateway
    v2 already does, v1 keeps the sender's case). ``url`` is the URL the sender called, query
    string included, for the schemes that sign it (Twilio, Square, HubSpot); ingest builds it
    from the provider's ``public_url`` or, without one, from the API Gateway event.
    """

    headers: Mapping[str, str]
    body: bytes
    method: str = "POST"
    url: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", {k.lower(): v for k, v in self.headers.items()})


@dataclass(frozen=True)
class Signed:
    """A delivery as a sender would make it: header names in the sender's case, the body and
    the URL (some schemes put the signature in the body, Mailgun, or the body's digest in the
    URL, Twilio's JSON webhooks)."""

    headers: dict[str, str]
    body: bytes
    url: str


@dataclass(frozen=True)
class Verified:
    """What a valid signature proved: the signed id (if the scheme signs one), the timestamp.

    ``secret`` is the secret that matched, for handshakes whose answer is keyed with it (Zoom);
    ``payload`` the body as the scheme already parsed it to verify (a signature or a timestamp
    inside the body), so ingest does not parse it twice.
    """

    signed_id: str | None = None
    timestamp: int | None = None
    secret: str | None = field(default=None, repr=False)
    payload: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class Identity:
    """Where one event sits: the deduplication key, its type, the informational delivery id.

    ``payload`` is what is stored for the event; None stores the delivery's whole body. A
    delivery that carries several events (a SendGrid or HubSpot batch) yields one Identity each,
    with that event's own object as its payload.
    """

    event_id: str
    event_type: str
    delivery_id: str | None = None
    payload: Any = None


@dataclass(frozen=True)
class Reply:
    """A protocol handshake (Slack's url_verification, Discord's PING, Zoom's url_validation,
    Twitch's challenge): answered as given, only after the signature verified, never stored.

    ``headers`` are response headers a sender reads (Asana's echoed ``X-Hook-Secret``, Dropbox's
    ``X-Content-Type-Options``), beside the content type."""

    body: str = ""
    status: int = 200
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, document: Any, status: int = 200) -> Reply:
        return cls(json.dumps(document, separators=(",", ":")), status)


# --- strict decoding helpers, shared by every scheme module ---------------------------


def fail(detail: str) -> AuthenticationFailed:
    return AuthenticationFailed(detail, reason="signature")


def required_header(headers: Headers, name: str) -> str:
    value = headers.get(name)
    if not value:
        raise fail(f"missing header {name}")
    if len(value) > MAX_SIGNATURE_HEADER_CHARS:
        raise fail(f"header {name} is too long")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no sender signed it, and it cannot be MACed
        raise fail(f"header {name} is not text") from None
    return value


def hex_digest(text: str, size: int = 32) -> bytes:
    """A hex digest of ``size`` bytes (SHA-256 unless a sender signs with SHA-1), else 401."""
    if not _HEX_OF_SIZE[size].fullmatch(text):
        raise fail(f"signature is not {2 * size} hex digits")
    return bytes.fromhex(text)


def b64_digest(text: str, size: int = 32) -> bytes:
    """A base64 digest of ``size`` bytes, padded, nothing around it, else 401."""
    if not _B64_OF_SIZE[size].fullmatch(text):
        raise fail(f"signature is not a base64 {size}-byte digest")
    return base64.b64decode(text, validate=True)


def parse_timestamp(text: str) -> int:
    if not _UNIX_SECONDS.fullmatch(text):
        raise fail("timestamp is not unix seconds in canonical form")
    return int(text)


def check_fresh(timestamp: int, now: int, tolerance: int) -> None:
    # Both directions: a far-future timestamp is as suspicious as an old one.
    age = now - timestamp  # positive: signed in the past
    if abs(age) > tolerance:
        when = f"{age}s in the past" if age > 0 else f"{-age}s in the future"
        raise AuthenticationFailed(f"timestamp {when}, tolerance {tolerance}s", reason="stale")


def check_fresh_subsecond(count: int, per_second: int, now: int, tolerance: int) -> int:
    """:func:`check_fresh` for a timestamp counted in finer units (HubSpot's and Linear's
    milliseconds, Twitch's nanoseconds); returns it in whole seconds.

    The seconds are rounded away from ``now`` (a whole second), so a timestamp a fraction of a
    second beyond the tolerance is refused, as the exact comparison would refuse it.
    """
    seconds, fraction = divmod(count, per_second)
    if fraction and seconds >= now:
        seconds += 1
    check_fresh(seconds, now, tolerance)
    return seconds


def token_digest(text: str) -> bytes:
    """A shared token (GitLab's, Telegram's) as a SHA-256 digest: compared as digests, the
    comparison takes the same time whatever the token's length (compare_digest on the raw
    strings would reveal it). surrogatepass: a secret read from the environment may hold one
    (an undecodable byte); a header cannot (required_header)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def compute_mac(key: bytes, *parts: bytes, digest: str = "sha256") -> bytes:
    """HMAC over the concatenated parts: SHA-256 unless a sender still signs with another
    digest (Twilio: SHA-1)."""
    mac = hmac.new(key, digestmod=digest)
    for part in parts:
        mac.update(part)
    return mac.digest()


def match_index(expected: Sequence[bytes], presented: Sequence[bytes]) -> int | None:
    """The index of the first expected digest (one per secret) that any presented one equals.

    Every pair is compared, without short-circuiting on the secret list, so timing says nothing
    about which secret (if any) matched.
    """
    found = None
    for index, want in enumerate(expected):
        matched = False
        for got in presented:
            matched |= hmac.compare_digest(want, got)
        if matched and found is None:
            found = index
    return found


def any_match(expected: Sequence[bytes], presented: Sequence[bytes]) -> bool:
    return match_index(expected, presented) is not None


def body_digest_id(event_type: str, body: bytes) -> str:
    """The deduplication key for schemes whose id header is unsigned: type, NUL, signed body.

    A redelivery (same type, same bytes) is a duplicate; the same bytes under another type are
    another event. ``event_type`` has passed :func:`bounded_text`, which refuses NUL, so the
    separator cannot occur inside it and the encoding is unambiguous.
    """
    return "sha256:" + hashlib.sha256(event_type.encode() + b"\x00" + body).hexdigest()


def content_digest_id(event_type: str, event: Mapping[str, Any], *, without: Sequence[str]) -> str:
    """The deduplication key of a signed event whose every copy differs in a few fields (a
    delivery timestamp, an attempt counter): :func:`body_digest_id` over the event in canonical
    JSON (sorted keys, no whitespace) with those top-level fields left out. Canonical JSON is
    deterministic for equal values, so equal events get equal keys however they were spaced."""
    kept = {key: value for key, value in event.items() if key not in without}
    canonical = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return body_digest_id(event_type, canonical.encode())


def object_to_sign(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object, for a ``sign`` that stamps or wraps it (Linear, Mailgun,
    Twitch), else None. Lenient on purpose: signing runs in tools; verification parses strictly
    (bodies.py)."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


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
    return storable(value, what)


def storable(value: str, what: str) -> str:
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


def optional_header(headers: Headers, *names: str) -> str | None:
    for name in names:
        value = headers.get(name)
        if value:
            return storable(value[:MAX_ID_CHARS], name)
    return None


# --- the interface ------------------------------------------------------------------------


class Scheme:
    """One provider signing convention. Subclasses set ``name`` and implement the hooks.

    Ingest calls them in this order: :meth:`verify` over the raw bytes, :meth:`parse` (unless
    verification already parsed the body), then :meth:`identify`. ``body_format`` names what a
    delivery's body is: ``json`` (one JSON object), ``json-array`` (a batch of event objects) or
    ``form`` (``application/x-www-form-urlencoded``, stored as a JSON object).
    """

    name: ClassVar[str]
    # Whether deliveries carry a signed timestamp (and so a tolerance applies).
    uses_timestamp: bool = True
    # The provider's own tolerance, where it documents one tighter or looser than 300 s.
    default_tolerance_s: ClassVar[int] = DEFAULT_TOLERANCE_S
    # Whether the scheme signs the URL the sender called (the provider then needs public_url
    # wherever the URL rebuilt from the API Gateway event differs from it).
    signs_url: ClassVar[bool] = False
    body_format: ClassVar[str] = "json"
    option_names: ClassVar[frozenset[str]] = frozenset()
    # The status that answers a new event: ingest's 202, or 200 for a provider that counts only
    # 200 as success (the body stays ingest's; a duplicate is answered 200 either way).
    accepted_status: ClassVar[int] = 202
    # Whether the sender makes requests that carry no signature and still need an answer (a GET
    # challenge, a first handshake): ingest then asks :meth:`handshake` before verifying.
    unsigned_handshakes: ClassVar[bool] = False
    # Whether every answer, rejections included, must have an empty body (Xero's rule).
    empty_answers: ClassVar[bool] = False

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - self.option_names
        if unknown:
            raise ConfigurationError(f"{self.name}: unknown option(s) {sorted(unknown)}")
        self.options = options

    @property
    def requires_secrets(self) -> bool:
        """Whether a provider of this scheme needs a secret at all: not one whose sender's
        certificates are downloaded (SNS, PayPal), where secrets are only optional pins."""
        return True

    def check_secret(self, secret: str) -> None:
        """Reject a secret this scheme cannot use (at load time, not on the request path)."""
        if not secret:
            raise ConfigurationError(f"{self.name}: empty secret")

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        raise NotImplementedError

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        """The answer to an unsigned handshake the scheme recognises and allows (each scheme
        says what it checks first), or None: the delivery is then verified as usual. Called
        only when ``unsigned_handshakes`` is set; a handshake is never stored."""
        return None

    def parse(self, delivery: Delivery) -> Any:
        """The verified body as the JSON value to store (400 when it is not one)."""
        from webhook_inbox.ingest import bodies

        return bodies.parse(self.body_format, delivery.body)

    @property
    def stores_body_as_is(self) -> bool:
        """Whether :meth:`parse` only checks the body, a JSON object kept as it came: ingest then
        stores the body's own text rather than serialising the parsed copy again (for a 1 MiB
        body that is tens of milliseconds of CPU)."""
        return self.body_format == "json" and type(self).parse is Scheme.parse

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> Sequence[Identity] | Reply:
        """The events a verified delivery carries (usually one), or the handshake to answer."""
        raise NotImplementedError

    def acknowledge(self, payload: Any, *, new: bool) -> Reply | None:
        """The answer to a stored delivery, when the provider needs another than ingest's 202
        (new) / 200 (duplicate) JSON: some count only 200 as success (``accepted_status``),
        some want 204 or a body of their own (they override this). None keeps ingest's."""
        if new and self.accepted_status != 202:
            return Reply.json({"status": "accepted"}, self.accepted_status)
        return None

    def sign(
        self,
        secret: str,
        body: bytes,
        *,
        timestamp: int,
        event_id: str | None = None,
        event_type: str | None = None,
        url: str = "",
    ) -> Signed:
        """The delivery the provider would send for ``body`` (to ``url``, for URL-signed ones)."""
        raise NotImplementedError
