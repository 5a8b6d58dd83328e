"""Zendesk: ``X-Zendesk-Webhook-Signature`` = base64 HMAC-SHA256 of the timestamp header's text
followed by the raw body; the timestamp is ISO 8601 UTC, not unix seconds."""

from __future__ import annotations

import base64
import calendar
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from webhook_inbox.errors import SignatureMismatch
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified

# UTC with a Z, as Zendesk's examples write it (2021-07-25T10:00:00Z); a fraction of a second
# is tolerated (and dropped for the window) in case a sender writes milliseconds. The text is
# signed as received; the key comes from the body, so its spelling cannot make a new event.
_ISO_SECONDS = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.[0-9]{1,9})?Z"
)


def iso_seconds(text: str) -> int:
    """Unix seconds of ``2021-07-25T10:00:00Z``; anything else (or no such date) is a 401."""
    match = _ISO_SECONDS.fullmatch(text)
    if match is None:
        raise base.fail("timestamp is not ISO 8601 UTC (2021-07-25T10:00:00Z)")
    try:
        moment = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S")
    except ValueError:  # month 13, February 30, a leap second
        raise base.fail("timestamp is not a valid date and time") from None
    return calendar.timegm(moment.timetuple())


class Zendesk(Scheme):
    """Zendesk webhooks: ``X-Zendesk-Webhook-Signature`` over
    ``{X-Zendesk-Webhook-Signature-Timestamp}{body}`` (no separator), keyed with the webhook's
    signing secret as shown (its UTF-8, not base64-decoded). The timestamp is held to
    ``tolerance_seconds`` both ways. Event-subscription webhooks carry ``id`` and ``type``
    (``zen:event-type:ticket.created``) in the body: the key and the type. A trigger or
    automation webhook's body is what its template writes, so the template must write both.
    ``X-Zendesk-Webhook-Invocation-Id`` is the delivery id."""

    name = "zendesk"

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        headers = delivery.headers
        presented = [base.b64_digest(base.required_header(headers, "x-zendesk-webhook-signature"))]
        stamp = base.required_header(headers, "x-zendesk-webhook-signature-timestamp")
        timestamp = iso_seconds(stamp)
        matched = base.match_index(
            [base.compute_mac(s.encode(), stamp.encode(), delivery.body) for s in secrets],
            presented,
        )
        if matched is None:
            raise SignatureMismatch("signature did not match")
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
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))
        mac = base.compute_mac(secret.encode(), stamp.encode(), body)
        headers = {
            "X-Zendesk-Webhook-Signature": base64.b64encode(mac).decode(),
            "X-Zendesk-Webhook-Signature-Timestamp": stamp,
        }
        if event_id:
            headers["X-Zendesk-Webhook-Invocation-Id"] = event_id
        return Signed(headers, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        return [
            Identity(
                event_id=base.bounded_text(payload.get("id"), "id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(payload.get("type"), "type", base.MAX_TYPE_CHARS),
                delivery_id=base.optional_header(
                    delivery.headers, "x-zendesk-webhook-invocation-id"
                ),
            )
        ]
