"""Stripe: ``Stripe-Signature: t=…,v1=…`` over ``{t}.{body}``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import (
    SignatureMismatch,
)
from webhook_inbox.schemes.base import (
    MAX_ID_CHARS,
    MAX_SIGNATURES_PER_HEADER,
    MAX_TYPE_CHARS,
    Delivery,
    Identity,
    Scheme,
    Signed,
    Verified,
    _any_match,
    _check_fresh,
    _fail,
    _header,
    _hex_digest,
    _mac,
    _timestamp,
    bounded_text,
)


class Stripe(Scheme):
    """Stripe: ``Stripe-Signature: t=…,v1=…``; HMAC-SHA256 hex of ``{t}.{body}``, key = UTF-8."""

    name = "stripe"

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        items = _header(delivery.headers, "stripe-signature").split(",")
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
        expected = [_mac(s.encode(), f"{timestamps[0]}.".encode(), delivery.body) for s in secrets]
        if not _any_match(expected, presented):
            raise SignatureMismatch("no v1 signature matched")
        _check_fresh(timestamp, now, tolerance)
        return Verified(timestamp=timestamp)

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
        mac = _mac(secret.encode(), f"{timestamp}.".encode(), body)
        return Signed({"Stripe-Signature": f"t={timestamp},v1={mac.hex()}"}, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        return [
            Identity(
                event_id=bounded_text(payload.get("id"), "event id", MAX_ID_CHARS),
                event_type=bounded_text(payload.get("type"), "event type", MAX_TYPE_CHARS),
            )
        ]
