"""Twitch EventSub (webhook transport): ``sha256=<hex>`` over message id + timestamp + body.

Three message types share the endpoint, named by the unsigned ``Twitch-Eventsub-Message-Type``
header: ``notification`` (an event), ``webhook_callback_verification`` (a challenge, answered
with its raw text and never stored) and ``revocation`` (Twitch stopped the subscription; stored
as the event type ``revocation`` so a handler can react). Because the header is not signed, each
type must also have its own body shape, which is signed: a header naming another type than the
body shows is refused, so a captured challenge cannot be stored as an event or the reverse.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from webhook_inbox.errors import InvalidPayload, SignatureMismatch
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified

NOTIFICATION = "notification"
CHALLENGE = "webhook_callback_verification"
REVOCATION = "revocation"
MAX_CHALLENGE_CHARS = 1024
NANOS = 10**9
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# RFC 3339 as Twitch sends it: a 'T', seconds, up to nine fractional digits (its example has
# seven), 'Z' or a numeric offset. ASCII digits only ([0-9], not \d, which matches any script).
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,9}))?(Z|[+-][0-9]{2}:[0-9]{2})"
)


def rfc3339_nanos(text: str) -> int:
    """Nanoseconds since the epoch of a strict RFC 3339 timestamp (no leap second), else 401.

    Not ``datetime.fromisoformat``: it accepts what RFC 3339 does not (a space for the 'T', week
    dates, no zone at all) and drops fractional digits beyond the sixth.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise base.fail("timestamp is not RFC 3339")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zone = match.group(7) or "", match.group(8)
    try:  # the calendar's ranges (month lengths, year 1 on, no second 60)
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise base.fail("timestamp is not a valid date and time") from None
    offset = 0
    if zone != "Z":
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[4:6])
        if zone_hours > 23 or zone_minutes > 59:
            raise base.fail("timestamp offset is out of range")
        offset = (zone_hours * 60 + zone_minutes) * 60 * (1 if zone[0] == "+" else -1)
    seconds = (moment - EPOCH) // timedelta(seconds=1) - offset
    return seconds * NANOS + int(fraction.ljust(9, "0") or "0")


def rfc3339(timestamp: int) -> str:
    """Unix seconds as Twitch writes them, with a fraction (``2021-02-19T23:47:00.000000000Z``)."""
    year, month, day, hour, minute, second = time.gmtime(timestamp)[:6]
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.000000000Z"


def _kind(payload: Mapping[str, Any]) -> str:
    """The message type the signed body shows: a challenge, an event, or neither."""
    if "challenge" in payload:
        return CHALLENGE
    if "event" in payload:
        return NOTIFICATION
    return REVOCATION


class Twitch(Scheme):
    """Twitch EventSub. Key: the signed ``Twitch-Eventsub-Message-Id``; type: the body's
    ``subscription.type`` (``channel.follow``), or ``revocation``; 10-minute tolerance."""

    name = "twitch"
    default_tolerance_s = 600

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        headers = delivery.headers
        message_id = base.required_header(headers, "twitch-eventsub-message-id")
        timestamp_text = base.required_header(headers, "twitch-eventsub-message-timestamp")
        signature = base.required_header(headers, "twitch-eventsub-message-signature")
        if not signature.startswith("sha256="):
            raise base.fail("signature lacks the sha256= prefix")
        presented = [base.hex_digest(signature.removeprefix("sha256="))]
        # id + timestamp + body has no separators: only the strict timestamp format (fixed
        # layout, zone last) keeps a captured signature from verifying under an id that took
        # over part of the timestamp, or a timestamp that took over part of the body.
        nanos = rfc3339_nanos(timestamp_text)
        signed = (message_id.encode(), timestamp_text.encode(), delivery.body)
        matched = base.match_index(
            [base.compute_mac(s.encode(), *signed) for s in secrets], presented
        )
        if matched is None:
            raise SignatureMismatch("signature did not match")
        timestamp = base.check_fresh_subsecond(nanos, NANOS, now, tolerance)
        return Verified(signed_id=message_id, timestamp=timestamp, secret=secrets[matched])

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        kind = delivery.headers.get("twitch-eventsub-message-type")
        if kind not in {NOTIFICATION, CHALLENGE, REVOCATION}:
            raise InvalidPayload("unknown Twitch-Eventsub-Message-Type")
        if _kind(payload) != kind:
            raise InvalidPayload("Twitch-Eventsub-Message-Type does not match the body")
        subscription = payload.get("subscription")
        if not isinstance(subscription, Mapping):
            raise InvalidPayload("subscription is missing or not an object")
        if kind == CHALLENGE:
            challenge = payload["challenge"]
            if not isinstance(challenge, str):
                raise InvalidPayload("challenge is not a string")
            # The raw challenge as the whole body, text/plain: Twitch compares it byte for byte.
            return Reply(
                base.bounded_text(challenge, "challenge", MAX_CHALLENGE_CHARS), 200, "text/plain"
            )
        if kind == NOTIFICATION:
            if not isinstance(payload["event"], Mapping):
                raise InvalidPayload("event is not an object")
            event_type = base.bounded_text(
                subscription.get("type"), "subscription.type", base.MAX_TYPE_CHARS
            )
        else:
            event_type = REVOCATION
        return [
            Identity(
                event_id=base.bounded_text(
                    verified.signed_id, "Twitch-Eventsub-Message-Id", base.MAX_ID_CHARS
                ),
                event_type=event_type,
            )
        ]

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
        """Signs a notification, or the message type the body shows (a ``challenge`` field: a
        verification; a body without ``event``: a revocation)."""
        message_id = event_id or str(uuid.uuid4())
        stamp = rfc3339(timestamp)
        document = base.object_to_sign(body)
        kind = _kind(document) if document is not None else NOTIFICATION
        headers = {
            "Twitch-Eventsub-Message-Id": message_id,
            "Twitch-Eventsub-Message-Retry": "0",
            "Twitch-Eventsub-Message-Type": kind,
            "Twitch-Eventsub-Message-Timestamp": stamp,
            "Twitch-Eventsub-Message-Signature": "sha256="
            + base.compute_mac(secret.encode(), message_id.encode(), stamp.encode(), body).hex(),
        }
        subscription = document.get("subscription") if document is not None else None
        if isinstance(subscription, Mapping) and isinstance(subscription.get("type"), str):
            headers["Twitch-Eventsub-Subscription-Type"] = subscription["type"]
            headers["Twitch-Eventsub-Subscription-Version"] = str(subscription.get("version", "1"))
        return Signed(headers, body, url)
