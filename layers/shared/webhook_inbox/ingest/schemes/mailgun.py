"""Mailgun: the signature travels inside the JSON body and covers only a timestamp and a token.

A webhook body is ``{"signature": {"timestamp", "token", "signature"}, "event-data": {...}}``
with ``signature`` = hex HMAC-SHA256(signing key, timestamp + token). The ``event-data`` is NOT
covered: anyone holding one captured signature object can attach any event-data to it. So the
row is keyed by the signed token (a token yields at most one event, however often it is
replayed) and handlers must treat ``event-data`` as unauthenticated (docs/providers.md).
"""

from __future__ import annotations

import json
import re
import secrets as _random
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_inbox.errors import InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified

# Mailgun's tokens are 50 random characters; anything printable and bounded is accepted, but
# never whitespace or control characters.
_TOKEN = re.compile(r"[!-~]{1,255}")
MAX_TIMESTAMP = 10**12


def _signed_timestamp(value: Any) -> tuple[str, int]:
    """The timestamp as signed (its decimal text) and as a number. Mailgun documents an int
    and sends a string of digits; both are accepted, nothing else (no floats, no booleans)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_TIMESTAMP:
        return str(value), value
    if isinstance(value, str):
        return value, base.parse_timestamp(value)
    raise base.fail("signature.timestamp is not unix seconds")


def _hex_field(signature: Mapping[str, Any], name: str) -> bytes:
    value = signature.get(name)
    if not isinstance(value, str):
        raise base.fail(f"signature.{name} is not a string")
    return base.hex_digest(value)


class Mailgun(Scheme):
    """Mailgun webhooks (JSON). Key: the signed ``signature.token``; type ``event-data.event``;
    ``event-data.id`` (unsigned) is the delivery id. A subaccount's events also carry a
    ``parent-signature`` made with the primary account's key: either signature verifies."""

    name = "mailgun"
    # Mailgun documents 200 as success (406 means "rejected, do not retry": never sent).
    accepted_status = 200

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        try:
            payload = bodies.json_object(delivery.body)
        except InvalidPayload as exc:
            # The signature is inside the body: a body that cannot be read (or stored, NUL in a
            # string) has no signature to check, so 401, not 400.
            raise base.fail(f"no signature: {exc.detail}") from None
        signature = payload.get("signature")
        if not isinstance(signature, Mapping):
            raise base.fail("no signature object")
        timestamp_text, timestamp = _signed_timestamp(signature.get("timestamp"))
        token = signature.get("token")
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise base.fail("signature.token is not a printable token")
        presented = [_hex_field(signature, "signature")]
        if "parent-signature" in signature:
            presented.append(_hex_field(signature, "parent-signature"))
        # timestamp + token with no separator: moving a digit across the boundary keeps the MAC
        # but moves the timestamp by a factor of ten, which the tolerance below refuses.
        signed = (timestamp_text.encode(), token.encode())
        matched = base.match_index(
            [base.compute_mac(s.encode(), *signed) for s in secrets], presented
        )
        if matched is None:
            raise SignatureMismatch("signature did not match")
        base.check_fresh(timestamp, now, tolerance)
        return Verified(
            signed_id=token, timestamp=timestamp, secret=secrets[matched], payload=payload
        )

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        event_data = payload.get("event-data")
        if not isinstance(event_data, Mapping):
            raise InvalidPayload("event-data is missing or not an object")
        event_type = base.bounded_text(
            event_data.get("event"), "event-data.event", base.MAX_TYPE_CHARS
        )
        # event-data.id names the event, but unsigned: informational, never the key.
        event_id = event_data.get("id")
        delivery_id = None
        if isinstance(event_id, str) and event_id:
            delivery_id = base.storable(event_id[: base.MAX_ID_CHARS], "event-data.id")
        return [
            Identity(
                event_id=base.bounded_text(
                    verified.signed_id, "signature.token", base.MAX_ID_CHARS
                ),
                event_type=event_type,
                delivery_id=delivery_id,
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
        """``body`` is the event-data (kept byte for byte inside the signed body), or a whole
        Mailgun body (one with ``event-data``), whose signature object is replaced."""
        token = event_id or _random.token_hex(25)  # 50 characters, as Mailgun's
        mac = base.compute_mac(secret.encode(), str(timestamp).encode(), token.encode()).hex()
        signature = {"token": token, "timestamp": str(timestamp), "signature": mac}
        document = base.object_to_sign(body)
        if document is not None and "event-data" in document:
            document["signature"] = signature
            signed_body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        else:
            head = json.dumps({"signature": signature}, separators=(",", ":"))[:-1].encode()
            signed_body = head + b',"event-data":' + body + b"}"
        return Signed({}, signed_body, url)
