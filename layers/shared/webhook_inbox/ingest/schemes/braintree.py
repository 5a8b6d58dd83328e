"""Braintree webhooks: the signature and the event are two fields of a form body.

``bt_payload`` is the notification XML in base64 (with line breaks every 76 characters);
``bt_signature`` is ``public_key|hex HMAC-SHA1(SHA1(private_key), bt_payload)``, several such pairs
joined by ``&`` when Braintree signs for more than one key. As Braintree's SDK, the payload may
only hold base64 characters and line breaks, and a signature over the payload with one more
trailing newline is accepted (a form parser may have eaten it). The secret is
``PUBLIC_KEY:PRIVATE_KEY``.

The XML's ``kind`` (``subscription_charged_successfully``) is the type; Braintree sends no event
id, so the key is the digest of the signed XML with its kind (the notification's own
``timestamp`` is inside it, so two notifications of one kind differ). The timestamp is not held
to a tolerance: Braintree retries a failed delivery for hours, with the same payload. Stored:
``{"kind", "timestamp", "notification"}``, the last the XML as text. ``GET ?bt_challenge=…``
(Braintree's legacy destination check) is answered ``public_key|HMAC-SHA1`` of the challenge.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode
from xml.etree import ElementTree

from webhook_inbox.errors import ConfigurationError, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.handshake_answers import query_parameters

_PAYLOAD = re.compile(rb"[A-Za-z0-9+=/\n]+")
_CHALLENGE = re.compile(r"[a-f0-9]{20,32}")
_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_PAIRS = 8


def _keys(secret: str) -> tuple[str, bytes]:
    """(public key, the HMAC key: SHA-1 of the private key) of a ``PUBLIC:PRIVATE`` secret."""
    public, _, private = secret.partition(":")
    # SHA-1 because Braintree keys its HMAC so; not a choice of ours.
    return public, hashlib.sha1(private.encode()).digest()  # noqa: S324


def _mac(key: bytes, content: bytes) -> bytes:
    return hmac.new(key, content, hashlib.sha1).digest()


def _field(form: dict[str, Any], name: str) -> str:
    value = form.get(name)
    if not isinstance(value, str) or not value:
        raise base.fail(f"{name} is missing or repeated")
    return value


class Braintree(Scheme):
    """Braintree webhooks (form body, ``bt_signature`` / ``bt_payload``)."""

    name = "braintree"
    uses_timestamp = False
    body_format = "form"
    unsigned_handshakes = True

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        public, colon, private = secret.partition(":")
        if not colon or not _KEY.fullmatch(public) or not _KEY.fullmatch(private):
            raise ConfigurationError(f"{self.name}: the secret is PUBLIC_KEY:PRIVATE_KEY")

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        if delivery.method != "GET":
            return None
        challenge = query_parameters(delivery.url).get("bt_challenge")
        if challenge is None:
            return None
        if not _CHALLENGE.fullmatch(challenge):
            raise InvalidPayload("bt_challenge is not 20-32 hex digits")
        public, key = _keys(secrets[0])
        return Reply(f"{public}|{_mac(key, challenge.encode()).hex()}", 200, "text/plain")

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        try:
            form = bodies.form(delivery.body)
        except InvalidPayload as exc:
            raise base.fail(f"no signature: {exc.detail}") from None
        signature = _field(form, "bt_signature")
        payload = _field(form, "bt_payload").encode()
        if not _PAYLOAD.fullmatch(payload):
            raise base.fail("bt_payload holds characters base64 does not")
        pairs = [p.split("|", 1) for p in signature.split("&") if "|" in p][:MAX_PAIRS]
        matched = None
        for index, secret in enumerate(secrets):
            public, key = _keys(secret)
            presented = [base.hex_digest(mac, 20) for pub, mac in pairs if pub == public]
            expected = [_mac(key, payload), _mac(key, payload + b"\n")]
            if base.any_match(expected, presented) and matched is None:
                matched = index
        if matched is None:
            raise SignatureMismatch("no bt_signature pair matched")
        return Verified(secret=secrets[matched], payload=_notification(payload))

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        kind = base.bounded_text(payload.get("kind"), "kind", base.MAX_TYPE_CHARS)
        xml = base.bounded_text(payload.get("notification"), "notification", bodies.MIB * 8)
        return [Identity(event_id=base.body_digest_id(kind, xml.encode()), event_type=kind)]

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
        """``body`` is a form whose ``bt_payload`` is the XML (what the samples hold) or already
        base64, else the notification itself (any other bytes are signed as the notification,
        as a test of what ingest refuses needs); returns the form Braintree would post."""
        try:
            fields = bodies.form(body)
        except InvalidPayload:
            fields = {}
        inner = fields.get("bt_payload")
        if isinstance(inner, str) and not inner.lstrip().startswith("<"):
            payload = inner.encode()  # already base64
        else:
            xml = inner.encode() if isinstance(inner, str) else body
            payload = base64.encodebytes(xml)  # 76-character lines, as Braintree's
        public, key = _keys(secret)
        signature = f"{public}|{_mac(key, payload).hex()}"
        form = urlencode({"bt_signature": signature, "bt_payload": payload.decode()})
        return Signed({}, form.encode(), url)


def _notification(payload: bytes) -> dict[str, Any]:
    """The signed payload's XML, checked and read: its kind, its timestamp and its text."""
    try:
        xml = base64.b64decode(payload.replace(b"\n", b""), validate=True)
        text = xml.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise InvalidPayload("bt_payload is not base64 of UTF-8 XML") from None
    # Braintree never sends a document type; refusing one refuses every entity expansion.
    if "<!" in text.replace("<![CDATA[", ""):
        raise InvalidPayload("the notification XML holds a DTD or a declaration")
    try:
        # No DTD (refused above), so no entity to expand and nothing external to fetch.
        root = ElementTree.fromstring(text)  # noqa: S314
    except ElementTree.ParseError:
        raise InvalidPayload("the notification is not well-formed XML") from None
    if root.tag != "notification":
        raise InvalidPayload("the XML is not a notification")
    kind, stamp = root.findtext("kind"), root.findtext("timestamp")
    return {
        "kind": kind.strip() if kind else None,
        "timestamp": stamp.strip() if stamp else None,
        "notification": base.storable(text, "notification"),
    }
