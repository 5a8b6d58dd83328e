"""HubSpot webhooks, signature v3: ``X-HubSpot-Signature-v3`` = base64 HMAC-SHA256 of
``{method}{URI}{body}{X-HubSpot-Request-Timestamp}``, the timestamp in milliseconds."""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import InvalidPayload, SignatureMismatch
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.urls import called_url

_UNIX_MILLISECONDS = re.compile(r"[0-9]{1,15}")
_METHOD = re.compile(r"[A-Z]{1,16}")
# HubSpot signs the URI with exactly these escapes decoded (its "validating requests" page
# lists them); every other escape (%20, %26, %3D ...) and "+" stay as they are. Percent escapes
# are case-insensitive, so %2f is decoded like %2F.
_SIGNED_DECODED = {
    "%3A": ":",
    "%2F": "/",
    "%3F": "?",
    "%40": "@",
    "%21": "!",
    "%24": "$",
    "%27": "'",
    "%28": "(",
    "%29": ")",
    "%2A": "*",
    "%2C": ",",
    "%3B": ";",
}
_SIGNED_ESCAPE = re.compile("|".join(_SIGNED_DECODED), re.IGNORECASE)
# A retry of an event differs from the first attempt only in this counter.
_PER_ATTEMPT = ("attemptNumber",)


def signed_uri(url: str) -> str:
    """The URI as HubSpot signs it: one left-to-right pass, so a decoded ``%`` never starts a
    new escape (``%253A`` stays ``%253A``)."""
    return _SIGNED_ESCAPE.sub(lambda m: _SIGNED_DECODED[m[0].upper()], url)


class HubSpot(Scheme):
    """HubSpot app webhooks (v3 signatures only; the unsigned-timestamp v1/v2 are refused).

    The key is the app's client secret as UTF-8. The timestamp must be within the tolerance
    (HubSpot: 5 minutes) in both directions. A body is a JSON array of up to 100 events, each
    stored as its own row typed by its ``subscriptionType``. HubSpot documents ``eventId`` as
    not unique and bumps ``attemptNumber`` on every retry, so an event's key is a digest of its
    type and its whole signed object except ``attemptNumber``.
    """

    name = "hubspot"
    signs_url = True
    body_format = "json-array"

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        headers = delivery.headers
        presented = [base.b64_digest(base.required_header(headers, "x-hubspot-signature-v3"))]
        millis = base.required_header(headers, "x-hubspot-request-timestamp")
        if not _UNIX_MILLISECONDS.fullmatch(millis):
            raise base.fail("timestamp is not unix milliseconds")
        if not _METHOD.fullmatch(delivery.method):
            raise base.fail("no HTTP method to verify against")
        head = (delivery.method + signed_uri(called_url(delivery))).encode()
        expected = [
            base.compute_mac(s.encode(), head, delivery.body, millis.encode()) for s in secrets
        ]
        matched = base.match_index(expected, presented)
        if matched is None:
            raise SignatureMismatch("signature did not match")
        timestamp = base.check_fresh_subsecond(int(millis), 1000, now, tolerance)
        return Verified(timestamp=timestamp, secret=secrets[matched])

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
        millis = str(timestamp * 1000)
        head = ("POST" + signed_uri(url)).encode()
        mac = base.compute_mac(secret.encode(), head, body, millis.encode())
        headers = {
            "X-HubSpot-Signature-v3": base64.b64encode(mac).decode(),
            "X-HubSpot-Request-Timestamp": millis,
        }
        return Signed(headers, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        if not isinstance(payload, list) or not payload:
            raise InvalidPayload("a HubSpot delivery is a non-empty JSON array of events")
        found = []
        for event in payload:
            if not isinstance(event, dict):
                raise InvalidPayload("every HubSpot event is a JSON object")
            raw_type = event.get("subscriptionType")
            event_type = base.bounded_text(raw_type, "subscriptionType", base.MAX_TYPE_CHARS)
            found.append(
                Identity(
                    event_id=base.content_digest_id(event_type, event, without=_PER_ATTEMPT),
                    event_type=event_type,
                    payload=event,
                )
            )
        return found
