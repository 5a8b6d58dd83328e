"""Twilio: ``X-Twilio-Signature`` = base64 HMAC-SHA1 of the URL Twilio called followed by the
form parameters, or of the URL alone when it carries ``bodySHA256`` (JSON bodies)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from webhook_inbox.errors import InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.urls import called_url

_B64_SHA1 = re.compile(r"[A-Za-z0-9+/]{27}=")
_DEFAULT_PORTS = {"https": 443, "http": 80}
# Inbound messages and calls ask for TwiML; an empty <Response/> does nothing, and status
# callbacks accept it as well as any 200.
_TWIML = Reply("<Response/>", 200, "text/xml")
# How a form delivery's type is derived: the first rule whose id parameter is present names
# the kind, refined by its status parameter(s) when one is present.
_KINDS = (
    ("RecordingSid", "recording", ("RecordingStatus",)),
    ("CallSid", "call", ("CallStatus",)),
    ("MessageSid", "message", ("MessageStatus", "SmsStatus")),
    ("SmsSid", "message", ("MessageStatus", "SmsStatus")),
)


class FormParams(dict[str, Any]):
    """The parameters of a form delivery, as stored; the type tells :meth:`Twilio.acknowledge`
    to answer TwiML (a JSON delivery's payload is a plain dict)."""


def _b64_sha1(text: str) -> bytes:
    if not _B64_SHA1.fullmatch(text):
        raise base.fail("signature is not a base64 SHA-1 digest")
    return base64.b64decode(text, validate=True)


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError:  # an unbalanced "[" in the host (the Host header is the sender's)
        raise base.fail("URL does not parse") from None


def _body_hash(url: str) -> bytes | None:
    """The ``bodySHA256`` the URL carries (a JSON delivery), or None (a form delivery)."""
    values = parse_qs(_split(url).query, keep_blank_values=True).get("bodySHA256")
    if values is None:
        return None
    if len(values) != 1:
        raise base.fail("bodySHA256 given more than once")
    return base.hex_digest(values[0])


def _port_variants(url: str) -> list[str]:
    """The URL without its port and with it (the default port added when it has none):
    Twilio's own validators accept either, since Twilio's signing is inconsistent about it."""
    parts = _split(url)
    try:
        port = parts.port
    except ValueError:
        raise base.fail("URL has an invalid port") from None
    start = url.find("//") + 2
    if start < 2 or url[start : start + len(parts.netloc)] != parts.netloc or not parts.netloc:
        raise base.fail("URL has no host")
    userinfo, at, host = parts.netloc.rpartition("@")
    if port is not None:
        host = host.rsplit(":", 1)[0]
    else:
        default = _DEFAULT_PORTS.get(parts.scheme)
        if default is None:
            return [url]
        port = default

    def with_netloc(netloc: str) -> str:
        return url[:start] + netloc + url[start + len(parts.netloc) :]

    return [with_netloc(f"{userinfo}{at}{host}"), with_netloc(f"{userinfo}{at}{host}:{port}")]


def _values(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def _normalised(params: Mapping[str, Any]) -> dict[str, list[str]]:
    """What the signature covers: each name once, its distinct values sorted."""
    return {name: sorted(set(_values(params[name]))) for name in sorted(params)}


def _signed_params(params: Mapping[str, Any]) -> str:
    return "".join(name + value for name, values in _normalised(params).items() for value in values)


def _signed_form_id(url: str, params: Mapping[str, Any]) -> str:
    """The key of a form delivery: a digest of exactly the text its signature covers (with the
    URL's port left out, since either form verifies).

    Names and values are concatenated without separators, after a URL whose query string the
    sender chose, so other parameters can sign the same text (``AccountSi=dAC…`` for
    ``AccountSid=AC…``, a parameter folded into the value before it or moved into the query).
    A key derived from the parameters, or from a type derived from them, would turn such a
    regrouped replay into a new event; the signed text is the same for all of them.
    """
    signed = _port_variants(url)[0] + _signed_params(params)
    return "sha256:" + hashlib.sha256(signed.encode()).hexdigest()


def _form(body: bytes) -> FormParams:
    params = _form_or_none(body)
    if params is None:
        # Twilio's form parameters are part of what it signs: no form, nothing to verify.
        raise base.fail("body is not a form")
    return params


def _form_or_none(body: bytes) -> FormParams | None:
    try:
        return FormParams(bodies.form(body))
    except InvalidPayload:
        return None


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


class Twilio(Scheme):
    """Twilio webhooks and status callbacks (Messaging, Voice, and the products that post
    JSON). The key is the account's Auth Token as UTF-8.

    A form delivery (``application/x-www-form-urlencoded``) is signed over the URL Twilio
    called, query string included, followed by each parameter name in sorted order with each
    of its distinct values in sorted order. A JSON delivery adds ``bodySHA256=<hex SHA-256 of
    the body>`` to the URL's query string and is signed over the URL alone. The URL decides
    which one a delivery is (the URL is signed; the Content-Type header is not).

    There is no timestamp: a captured delivery verifies forever and is only deduplicated.
    There is no event id either: the key of a form delivery is a digest of the text the
    signature covers (the URL and the parameters as signed: in another order, repeated or
    regrouped they sign the same text, so they are the same event); of a JSON delivery, of
    the type and the body. The unsigned ``I-Twilio-Idempotency-Token`` header is the delivery
    id. Form deliveries are answered with an empty TwiML response.
    """

    name = "twilio"
    uses_timestamp = False
    signs_url = True
    body_format = "form"

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        presented = [_b64_sha1(base.required_header(delivery.headers, "x-twilio-signature"))]
        url = called_url(delivery)
        declared = _body_hash(url)
        params = None
        if declared is None:
            params = _form(delivery.body)
            tail = _signed_params(params)
            body_intact = True
        else:
            tail = ""
            body_intact = base.any_match([hashlib.sha256(delivery.body).digest()], [declared])
        variants = _port_variants(url)
        expected = [
            base.compute_mac(s.encode(), (variant + tail).encode(), digest="sha1")
            for s in secrets
            for variant in variants
        ]
        matched = base.match_index(expected, presented)
        if matched is None or not body_intact:
            raise SignatureMismatch("signature did not match")
        return Verified(secret=secrets[matched // len(variants)], payload=params)

    def parse(self, delivery: Delivery) -> Any:
        if _body_hash(delivery.url) is None:
            return FormParams(bodies.form(delivery.body))
        return bodies.json_object(delivery.body)

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
        """A form body is signed as a form; a JSON body (or anything that is not a form) the
        JSON way, with ``bodySHA256`` added to the URL it returns."""
        headers: dict[str, str] = {}
        params = None if _is_json(body) else _form_or_none(body)
        if params is None:
            digest = hashlib.sha256(body).hexdigest()
            url += ("&" if "?" in url else "?") + f"bodySHA256={digest}"
            headers["Content-Type"] = "application/json"
        tail = "" if params is None else _signed_params(params)
        mac = base.compute_mac(secret.encode(), (url + tail).encode(), digest="sha1")
        headers["X-Twilio-Signature"] = base64.b64encode(mac).decode()
        if event_id:
            headers["I-Twilio-Idempotency-Token"] = event_id
        return Signed(headers, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        delivery_id = base.optional_header(delivery.headers, "i-twilio-idempotency-token")
        if isinstance(payload, FormParams):
            event_type = _form_type(payload)
            event_id = _signed_form_id(delivery.url, payload)
        else:  # JSON: the body's own type, if it names one
            raw_type = payload.get("type")
            event_type = "json"
            if isinstance(raw_type, str):
                event_type = base.bounded_text(raw_type, "type", base.MAX_TYPE_CHARS)
            event_id = base.body_digest_id(event_type, delivery.body)
        return [Identity(event_id=event_id, event_type=event_type, delivery_id=delivery_id)]

    def acknowledge(self, payload: Any, *, new: bool) -> Reply | None:
        return _TWIML if isinstance(payload, FormParams) else None


def _form_type(params: Mapping[str, Any]) -> str:
    """``EventType`` when the product names its events (TaskRouter, Conversations), else the
    kind of resource the parameters describe and its status: ``message.delivered``,
    ``call.completed``, ``recording.completed``; ``twilio`` when nothing matches."""
    if "EventType" in params:
        return base.bounded_text(params["EventType"], "EventType", base.MAX_TYPE_CHARS)
    for id_name, kind, status_names in _KINDS:
        if id_name not in params:
            continue
        status_name = next((n for n in status_names if n in params), None)
        if status_name is None:
            return kind
        status = base.bounded_text(
            params[status_name], status_name, base.MAX_TYPE_CHARS - len(kind) - 1
        )
        return f"{kind}.{status}"
    return "twilio"
