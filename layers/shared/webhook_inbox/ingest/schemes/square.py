"""Square: ``x-square-hmacsha256-signature`` = base64 HMAC-SHA256 of notification URL + body."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import SignatureMismatch
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.urls import called_url


class Square(Scheme):
    """Square webhooks: the signature covers the subscription's notification URL (the URL
    Square calls, query string included) followed by the raw body; the key is the
    subscription's signature key as UTF-8 (not base64-decoded). No timestamp: a captured
    delivery verifies forever and is only deduplicated. The event id is the signed body's
    ``event_id``, the type its ``type`` (``payment.created``)."""

    name = "square"
    uses_timestamp = False
    signs_url = True

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        presented = [
            base.b64_digest(base.required_header(delivery.headers, "x-square-hmacsha256-signature"))
        ]
        url = called_url(delivery).encode()
        matched = base.match_index(
            [base.compute_mac(s.encode(), url, delivery.body) for s in secrets], presented
        )
        if matched is None:
            raise SignatureMismatch("signature did not match")
        return Verified(secret=secrets[matched])

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
        mac = base.compute_mac(secret.encode(), url.encode(), body)
        return Signed({"x-square-hmacsha256-signature": base64.b64encode(mac).decode()}, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        return [
            Identity(
                event_id=base.bounded_text(payload.get("event_id"), "event_id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(
                    payload.get("type"), "event type", base.MAX_TYPE_CHARS
                ),
            )
        ]
