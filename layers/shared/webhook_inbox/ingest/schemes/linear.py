"""Linear: ``Linear-Signature`` = hex HMAC-SHA256 of the body; the timestamp is inside the body.

``webhookTimestamp`` (milliseconds) lives in the signed JSON and must be within 60 s of now,
both ways (Linear's SDK). Linear sends no event id, and since every retry must carry a fresh
``webhookTimestamp`` (retries come after 1 min, 1 h and 6 h), every retry has other bytes: the
key is a digest of the event without ``webhookTimestamp`` (:func:`content_digest_id`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import SignatureMismatch
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified

TIMESTAMP_FIELD = "webhookTimestamp"
MAX_TIMESTAMP_MS = 10**15


class Linear(Scheme):
    """Linear webhooks: type ``<type>.<action>`` (``Issue.create``), ``Linear-Delivery`` as the
    delivery id, 200 for new events (Linear counts any other status as a failure)."""

    name = "linear"
    default_tolerance_s = 60
    accepted_status = 200

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        presented = [base.hex_digest(base.required_header(delivery.headers, "linear-signature"))]
        matched = base.match_index(
            [base.compute_mac(s.encode(), delivery.body) for s in secrets], presented
        )
        if matched is None:
            raise SignatureMismatch("signature did not match")
        # Authentic from here on: a body that is not a JSON object is a 400, as for any sender.
        payload = bodies.json_object(delivery.body)
        stamp = payload.get(TIMESTAMP_FIELD)
        if (
            not isinstance(stamp, int)
            or isinstance(stamp, bool)
            or not 0 <= stamp < MAX_TIMESTAMP_MS
        ):
            # Without it a captured delivery would replay forever: refuse it like a bad signature.
            raise base.fail(f"{TIMESTAMP_FIELD} is missing or not epoch milliseconds")
        timestamp = base.check_fresh_subsecond(stamp, 1000, now, tolerance)
        return Verified(timestamp=timestamp, secret=secrets[matched], payload=payload)

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        entity = base.bounded_text(payload.get("type"), "type", base.MAX_TYPE_CHARS)
        action = base.bounded_text(payload.get("action"), "action", base.MAX_TYPE_CHARS)
        event_type = base.bounded_text(f"{entity}.{action}", "event type", base.MAX_TYPE_CHARS)
        return [
            Identity(
                event_id=base.content_digest_id(event_type, payload, without=(TIMESTAMP_FIELD,)),
                event_type=event_type,
                delivery_id=base.optional_header(delivery.headers, "linear-delivery"),
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
        """Stamps ``webhookTimestamp`` (``timestamp`` in milliseconds) into a JSON object body,
        as Linear does on every attempt, then signs; any other body is signed as it is."""
        headers = {"Linear-Delivery": event_id or str(uuid.uuid4())}
        document = base.object_to_sign(body)
        if document is not None:
            document[TIMESTAMP_FIELD] = timestamp * 1000
            body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
            if isinstance(document.get("type"), str):
                headers["Linear-Event"] = document["type"]
        headers["Linear-Signature"] = base.compute_mac(secret.encode(), body).hex()
        return Signed(headers, body, url)
