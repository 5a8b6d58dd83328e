"""Paddle Billing: ``Paddle-Signature: ts=…;h1=<hex>[;h1=…]`` over ``{ts}:{body}``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import SignatureMismatch
from webhook_inbox.schemes.base import (
    MAX_ID_CHARS,
    MAX_SIGNATURES_PER_HEADER,
    MAX_TYPE_CHARS,
    Delivery,
    Identity,
    Reply,
    Scheme,
    Signed,
    Verified,
    _check_fresh,
    _fail,
    _header,
    _hex_digest,
    _mac,
    _match_index,
    _timestamp,
    bounded_text,
)

# Paddle documents a 200 ("respond with HTTP 200 within five seconds"), not any 2xx.
_ACCEPTED = Reply.json({"status": "accepted"}, 200)


class Paddle(Scheme):
    """Paddle Billing notifications: HMAC-SHA256 hex of ``{ts}:{body}`` keyed with the whole
    destination secret (``pdl_ntfset_…``, prefix included) as UTF-8; several ``h1`` during a
    secret rotation, any one matching. The event id is the signed body's ``event_id``, the type
    its ``event_type``; ``notification_id`` (one per destination) is the delivery id.

    The default tolerance is Paddle's own, 5 seconds (what its SDKs enforce), in both
    directions. Unknown ``key=value`` items in the header are ignored (Paddle's Python SDK
    rejects them; ignoring them keeps a future signature version from failing every
    delivery, and an ``h1`` must still match)."""

    name = "paddle"
    default_tolerance_s = 5

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        items = _header(delivery.headers, "paddle-signature").split(";")
        if len(items) > MAX_SIGNATURES_PER_HEADER + 2:
            raise _fail("too many signature items")
        timestamps: list[str] = []
        presented: list[bytes] = []
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                raise _fail("signature item is not key=value")
            if key == "ts":
                timestamps.append(value)
            elif key == "h1":
                presented.append(_hex_digest(value))
        if len(timestamps) != 1:
            raise _fail("expected exactly one ts=")
        timestamp = _timestamp(timestamps[0])
        if not presented:
            raise _fail("no h1 signature")
        head = f"{timestamps[0]}:".encode()
        matched = _match_index([_mac(s.encode(), head, delivery.body) for s in secrets], presented)
        if matched is None:
            raise SignatureMismatch("no h1 signature matched")
        _check_fresh(timestamp, now, tolerance)
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
        mac = _mac(secret.encode(), f"{timestamp}:".encode(), body)
        return Signed({"Paddle-Signature": f"ts={timestamp};h1={mac.hex()}"}, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        notification = payload.get("notification_id")
        return [
            Identity(
                event_id=bounded_text(payload.get("event_id"), "event_id", MAX_ID_CHARS),
                event_type=bounded_text(payload.get("event_type"), "event_type", MAX_TYPE_CHARS),
                delivery_id=(
                    None
                    if notification is None
                    else bounded_text(notification, "notification_id", MAX_ID_CHARS)
                ),
            )
        ]

    def acknowledge(self, payload: Any, *, new: bool) -> Reply | None:
        return _ACCEPTED if new else None  # a duplicate is already ingest's 200
