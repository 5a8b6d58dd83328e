"""The configurable HMAC scheme and its presets: GitHub, Shopify and Slack."""

from __future__ import annotations

import base64
import re
import secrets as _random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from webhook_inbox.errors import (
    ConfigurationError,
    SignatureMismatch,
)
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified

_PLACEHOLDERS = ("id", "timestamp", "body")
_PLACEHOLDER = re.compile(r"\{(id|timestamp)\}")  # in the head; {body} is always last
_ANY_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


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
    # The hash a preset's sender signs with (a few still use SHA-1); not an option of the
    # generic scheme, whose name says SHA-256.
    digest: ClassVar[str] = "sha256"
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
        size = base.DIGEST_SIZES[self.digest]
        decode = base.hex_digest if self.encoding == "hex" else base.b64_digest
        self._decode: Callable[[str], bytes] = lambda text: decode(text, size)

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
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        headers, body = delivery.headers, delivery.body
        value = base.required_header(headers, self.signature_header)
        if not value.startswith(self.prefix):
            raise base.fail(f"signature lacks the {self.prefix} prefix")
        presented = [self._decode(value.removeprefix(self.prefix))]
        timestamp_text = ""
        timestamp = None
        if self.timestamp_header:
            timestamp_text = base.required_header(headers, self.timestamp_header)
            timestamp = base.parse_timestamp(timestamp_text)
        msg_id = (
            base.required_header(headers, self.id_header)
            if self.signs_id and self.id_header
            else ""
        )
        head = self._head(msg_id, timestamp_text)
        matched = base.match_index(
            [base.compute_mac(s.encode(), head, body, digest=self.digest) for s in secrets],
            presented,
        )
        if matched is None:
            raise SignatureMismatch("signature did not match")
        if timestamp is not None:
            base.check_fresh(timestamp, now, tolerance)
        return Verified(signed_id=msg_id or None, timestamp=timestamp, secret=secrets[matched])

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
        msg_id = event_id or (f"evt_{_random.token_urlsafe(12)}" if self.signs_id else "")
        mac = base.compute_mac(
            secret.encode(), self._head(msg_id, str(timestamp)), body, digest=self.digest
        )
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
        return Signed(headers, body, url)

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        headers = delivery.headers
        if self.type_header:
            raw_type = headers.get(self.type_header)
        else:
            raw_type = base.json_path(payload, self.type_path)
        event_type = base.bounded_text(raw_type, "event type", base.MAX_TYPE_CHARS)
        delivery_id = None
        if self.signs_id:
            event_id = base.bounded_text(verified.signed_id, "event id", base.MAX_ID_CHARS)
        elif self.id_path:
            event_id = base.bounded_text(
                base.json_path(payload, self.id_path), "event id", base.MAX_ID_CHARS
            )
        else:
            event_id = base.body_digest_id(event_type, delivery.body)
        if not self.signs_id and self.id_header:
            delivery_id = base.optional_header(headers, self.id_header)
        return [Identity(event_id=event_id, event_type=event_type, delivery_id=delivery_id)]


class _Preset(GenericHmac):
    """A provider whose convention is one fixed configuration of :class:`GenericHmac`: the HMAC
    plumbing (prefix, encoding, signed content, freshness) is the generic scheme's; a preset
    only names its headers and says how the provider identifies its events."""

    preset: ClassVar[dict[str, str]]

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        if options:
            raise ConfigurationError(f"{self.name}: unknown option(s) {sorted(options)}")
        super().__init__(self.preset)

    @staticmethod
    def digest_identity(
        event_type: str, delivery: Delivery, *delivery_id_headers: str
    ) -> list[Identity]:
        """The identity of an event whose id is not signed: the key is the body digest with the
        type, and the first of ``delivery_id_headers`` present is kept as the delivery id."""
        return [
            Identity(
                event_id=base.body_digest_id(event_type, delivery.body),
                event_type=event_type,
                delivery_id=base.optional_header(delivery.headers, *delivery_id_headers),
            )
        ]


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
        timestamp: int,
        event_id: str | None = None,
        event_type: str | None = None,
        url: str = "",
    ) -> Signed:
        # X-GitHub-Event carries the event without its action ("issues", not "issues.opened").
        event = event_type.split(".", 1)[0] if event_type else None
        return super().sign(
            secret, body, timestamp=timestamp, event_id=event_id, event_type=event, url=url
        )

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        # The preset's own header names: Gitea (a subclass) sends GitHub's shape under its own.
        event_header, delivery_header = self.preset["type_header"], self.preset["id_header"]
        event = base.bounded_text(
            delivery.headers.get(event_header.lower()), event_header, base.MAX_TYPE_CHARS
        )
        action = payload.get("action")
        if isinstance(action, str) and action:
            event = base.bounded_text(f"{event}.{action}", "event type", base.MAX_TYPE_CHARS)
        return self.digest_identity(event, delivery, delivery_header.lower())


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
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        headers = delivery.headers
        topic = base.bounded_text(
            headers.get("x-shopify-topic"), "X-Shopify-Topic", base.MAX_TYPE_CHARS
        )
        # Older Shopify documentation names the id header X-Shopify-Event-Id.
        return self.digest_identity(topic, delivery, "x-shopify-webhook-id", "x-shopify-event-id")


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
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        if payload.get("type") == "url_verification":
            challenge = base.bounded_text(payload.get("challenge"), "challenge", 1024)
            return Reply.json({"challenge": challenge})
        event = payload.get("event")
        inner_type = event.get("type") if isinstance(event, Mapping) else None
        return [
            Identity(
                event_id=base.bounded_text(payload.get("event_id"), "event_id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(inner_type or payload.get("type"), "event type", 255),
            )
        ]
