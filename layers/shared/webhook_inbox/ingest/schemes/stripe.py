"""Stripe: ``Stripe-Signature: t=…,v1=…`` over ``{t}.{body}``; the header shape Paddle, Calendly
and Mux share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from webhook_inbox.errors import (
    SignatureMismatch,
)
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified


class TimestampedHeader(Scheme):
    """One header listing a timestamp and hex HMAC-SHA256 signatures of
    ``{timestamp}{joiner}{body}`` as ``key=value`` items (several signatures during a secret
    rotation, any one matching; other keys ignored, as Stripe's own library does). Stripe's
    shape; a subclass names the header, separator, keys and joiner."""

    header_name: ClassVar[str]
    separator: ClassVar[str]
    time_key: ClassVar[str]
    version: ClassVar[str]
    joiner: ClassVar[str]

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        items = base.required_header(delivery.headers, self.header_name.lower()).split(
            self.separator
        )
        if len(items) > base.MAX_SIGNATURES_PER_HEADER + 2:
            raise base.fail("too many signature items")
        timestamps: list[str] = []
        presented: list[bytes] = []
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                raise base.fail("signature item is not key=value")
            if key == self.time_key:
                timestamps.append(value)
            elif key == self.version:
                presented.append(base.hex_digest(value))
        if len(timestamps) != 1:
            raise base.fail(f"expected exactly one {self.time_key}=")
        timestamp = base.parse_timestamp(timestamps[0])
        if not presented:
            raise base.fail(f"no {self.version} signature")
        head = f"{timestamps[0]}{self.joiner}".encode()
        matched = base.match_index(
            [base.compute_mac(s.encode(), head, delivery.body) for s in secrets], presented
        )
        if matched is None:
            raise SignatureMismatch(f"no {self.version} signature matched")
        base.check_fresh(timestamp, now, tolerance)
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
        mac = base.compute_mac(secret.encode(), f"{timestamp}{self.joiner}".encode(), body)
        value = f"{self.time_key}={timestamp}{self.separator}{self.version}={mac.hex()}"
        return Signed({self.header_name: value}, body, url)


class Stripe(TimestampedHeader):
    """Stripe: ``Stripe-Signature: t=…,v1=…``; HMAC-SHA256 hex of ``{t}.{body}``, key = UTF-8."""

    name = "stripe"
    header_name = "Stripe-Signature"
    separator = ","
    time_key = "t"
    version = "v1"  # v0 and future schemes are ignored
    joiner = "."

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        return [
            Identity(
                event_id=base.bounded_text(payload.get("id"), "event id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(
                    payload.get("type"), "event type", base.MAX_TYPE_CHARS
                ),
            )
        ]


class Calendly(TimestampedHeader):
    """Calendly: ``Calendly-Webhook-Signature: t=…,v1=<hex>``, Stripe's construction keyed with
    the subscription's signing key. The type is the body's ``event`` (``invitee.created``);
    Calendly sends no event id, so the key is the body digest with the type (a retry re-signs
    the same body under a new ``t``: a duplicate)."""

    name = "calendly"
    header_name = "Calendly-Webhook-Signature"
    separator = ","
    time_key = "t"
    version = "v1"
    joiner = "."

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        event = base.bounded_text(payload.get("event"), "event", base.MAX_TYPE_CHARS)
        return [Identity(event_id=base.body_digest_id(event, delivery.body), event_type=event)]


class Mux(Stripe):
    """Mux: ``Mux-Signature: t=…,v1=<hex>``, Stripe's construction keyed with the webhook's
    signing secret; the body's ``id`` is the key, ``type`` (``video.asset.ready``) the type."""

    name = "mux"
    header_name = "Mux-Signature"
