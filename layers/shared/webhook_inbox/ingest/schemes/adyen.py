"""Adyen standard (payments) webhooks: each notification item carries its own signature.

A delivery is ``{"live": "false", "notificationItems": [{"NotificationRequestItem": {…}}]}``.
Each item's ``additionalData.hmacSignature`` is base64 HMAC-SHA256, keyed with the hex-decoded
HMAC key, over eight of the item's fields joined by colons: ``pspReference``,
``originalReference``, ``merchantAccountCode``, ``merchantReference``, ``amount.value``,
``amount.currency``, ``eventCode``, ``success`` (a missing field signed as empty text). Every item
is verified, not only the first (Adyen's own helper checks the first alone); one that fails
refuses the delivery. Nothing else is signed: ``live``, ``eventDate``, ``reason`` and the rest
of ``additionalData`` are as authentic as the channel, and no timestamp bounds a replay.

Each item is a row keyed ``pspReference:eventCode:success`` (all signed): Adyen's redelivery of an
item is a duplicate, the same payment's next event (a CAPTURE after its AUTHORISATION) a new row,
and a failed then successful attempt two rows. Adyen wants ``[accepted]`` back.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_inbox.errors import ConfigurationError, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified

SIGNED_FIELDS = (
    "pspReference",
    "originalReference",
    "merchantAccountCode",
    "merchantReference",
    "value",
    "currency",
    "eventCode",
    "success",
)
ACCEPTED = Reply("[accepted]", 200, "text/plain")
MAX_ITEMS = 1000


def _field_text(value: Any, name: str) -> str:
    """A signed field as Adyen writes it into the signed string: text as is, an integer in
    decimal, an absent field as empty text; anything else cannot have been signed (401)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise base.fail(f"{name} is neither text nor an integer")


def signed_string(item: Mapping[str, Any]) -> bytes:
    amount = item.get("amount")
    amount = amount if isinstance(amount, Mapping) else {}
    fields = {**item, "value": amount.get("value"), "currency": amount.get("currency")}
    return ":".join(_field_text(fields.get(name), name) for name in SIGNED_FIELDS).encode()


def _items(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each ``NotificationRequestItem`` of a delivery, else 400 (verify makes it a 401: the
    signatures are inside them)."""
    wrapped = payload.get("notificationItems")
    if not isinstance(wrapped, list) or not 1 <= len(wrapped) <= MAX_ITEMS:
        raise InvalidPayload("notificationItems is missing, empty or too long")
    items = []
    for entry in wrapped:
        item = entry.get("NotificationRequestItem") if isinstance(entry, Mapping) else None
        if not isinstance(item, dict):
            raise InvalidPayload("an entry has no NotificationRequestItem object")
        items.append(item)
    return items


class Adyen(Scheme):
    """Adyen payments webhooks (JSON, HMAC inside each item). The secret is the HMAC key as the
    Customer Area shows it (hex)."""

    name = "adyen"
    uses_timestamp = False

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        try:
            key = binascii.a2b_hex(secret)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"{self.name}: the HMAC key is hex") from None
        if len(key) < 16:
            raise ConfigurationError(f"{self.name}: the HMAC key is too short")

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        try:
            payload = bodies.json_object(delivery.body)
            items = _items(payload)
        except InvalidPayload as exc:
            raise base.fail(f"no signature: {exc.detail}") from None
        keys = [binascii.a2b_hex(s) for s in secrets]
        matched_any = 0
        for item in items:
            extra = item.get("additionalData")
            presented = extra.get("hmacSignature") if isinstance(extra, Mapping) else None
            if not isinstance(presented, str):
                raise base.fail("an item has no additionalData.hmacSignature")
            digest = base.b64_digest(presented)
            content = signed_string(item)
            matched = base.match_index([base.compute_mac(k, content) for k in keys], [digest])
            if matched is None:
                raise SignatureMismatch("an item's signature did not match")
            matched_any = matched
        return Verified(secret=secrets[matched_any], payload=payload)

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        found = []
        for item in _items(payload):
            psp = base.bounded_text(item.get("pspReference"), "pspReference", 64)
            code = base.bounded_text(item.get("eventCode"), "eventCode", base.MAX_TYPE_CHARS)
            success = base.bounded_text(item.get("success"), "success", 8)
            found.append(
                Identity(
                    event_id=base.bounded_text(
                        f"{psp}:{code}:{success}", "event id", base.MAX_ID_CHARS
                    ),
                    event_type=code,
                    # live (unsigned) beside the item, so a handler can tell test from live.
                    payload={**item, "live": payload.get("live")},
                )
            )
        return found

    def acknowledge(self, payload: Any, *, new: bool) -> Reply | None:
        return ACCEPTED

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
        """Signs every item of ``body`` (a whole notification, or one NotificationRequestItem,
        which is wrapped) and returns the re-serialised JSON: Adyen signs fields, not bytes."""
        document = base.object_to_sign(body) or {}
        if "notificationItems" not in document:
            document = {
                "live": "false",
                "notificationItems": [{"NotificationRequestItem": document}],
            }
        key = binascii.a2b_hex(secret)
        for entry in document.get("notificationItems") or ():
            item = entry.get("NotificationRequestItem") if isinstance(entry, dict) else None
            if isinstance(item, dict):
                mac = base.compute_mac(key, signed_string(item))
                extra = item.get("additionalData")
                extra = dict(extra) if isinstance(extra, Mapping) else {}
                extra["hmacSignature"] = base64.b64encode(mac).decode()
                item["additionalData"] = extra
        signed = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        return Signed({}, signed, url)
