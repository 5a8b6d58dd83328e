"""PayPal webhooks: SHA256withRSA over ``transmission_id|transmission_time|webhook_id|crc32``,
the certificate at ``PAYPAL-CERT-URL`` (:mod:`.certificates` fetches, caches or pins it).

``crc32`` is the CRC-32 of the raw body as an unsigned decimal (PayPal's documented
self-verification). The body is covered only through that CRC-32, **which is not a
cryptographic hash**: whoever holds one signed delivery can make another body with the same
CRC-32 (four chosen bytes suffice) that verifies under the same signature until the
transmission time leaves the tolerance. The event id (the body's ``id``) and type
(``event_type``) are therefore only as good as the CRC-32. What bounds it: TLS keeps deliveries
from being read on the way, the tolerance is 300 s by default, and a captured transmission's
altered copy must arrive within it. Where that is not enough, confirm a stored event through
PayPal's API (``GET /v1/notifications/webhooks-events/{id}``) before acting on it.

``options.webhook_id`` (the id of the webhook in PayPal's developer dashboard, which PayPal
signs) is required; ``options.sandbox`` selects api.sandbox.paypal.com over api.paypal.com as
the one host certificates may come from. ``PAYPAL-AUTH-ALGO`` must be ``SHA256withRSA``.
"""

from __future__ import annotations

import base64
import re
import zlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest.schemes import base, certificates
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Signed, Verified
from webhook_inbox.ingest.schemes.certificates import CertificateScheme, UrlRule

LIVE_HOST = "api.paypal.com"
SANDBOX_HOST = "api.sandbox.paypal.com"
_CERT_PATH = re.compile(r"/v1/notifications/certs/[A-Za-z0-9\-]{1,100}")
_WEBHOOK_ID = re.compile(r"[A-Za-z0-9]{1,50}")
# The verify-webhook-signature API's own limits for these headers.
_TRANSMISSION_ID = re.compile(r"[A-Za-z0-9\-]{1,50}")
ALGORITHM = "SHA256withRSA"


def _rule(host: str) -> UrlRule:
    return UrlRule("PAYPAL-CERT-URL", re.compile(re.escape(host)), _CERT_PATH)


def signed_string(transmission_id: str, time_text: str, webhook_id: str, body: bytes) -> bytes:
    return f"{transmission_id}|{time_text}|{webhook_id}|{zlib.crc32(body)}".encode()


class PayPal(CertificateScheme):
    name = "paypal"
    option_names = frozenset({"webhook_id", "sandbox", "certificates"})
    # PayPal documents no window; each retry is a new transmission (its own id and time).
    default_tolerance_s = base.DEFAULT_TOLERANCE_S

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        webhook_id = self.options.get("webhook_id")
        if not isinstance(webhook_id, str) or not _WEBHOOK_ID.fullmatch(webhook_id):
            raise ConfigurationError(
                "paypal: options.webhook_id is the webhook's id from PayPal's developer "
                "dashboard (letters and digits)"
            )
        sandbox = self.options.get("sandbox", False)
        if not isinstance(sandbox, bool):
            raise ConfigurationError("paypal: options.sandbox is true or false")
        self.webhook_id: str = webhook_id
        self.certificate_rule = _rule(SANDBOX_HOST if sandbox else LIVE_HOST)

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        headers = delivery.headers
        algorithm = base.required_header(headers, "paypal-auth-algo")
        if algorithm != ALGORITHM:
            raise base.fail(f"PAYPAL-AUTH-ALGO is not {ALGORITHM}")
        transmission_id = base.required_header(headers, "paypal-transmission-id")
        if not _TRANSMISSION_ID.fullmatch(transmission_id):
            raise base.fail("PAYPAL-TRANSMISSION-ID is malformed")
        time_text = base.required_header(headers, "paypal-transmission-time")
        timestamp = certificates.rfc3339_seconds(time_text, "PAYPAL-TRANSMISSION-TIME")
        url = certificates.checked_url(
            base.required_header(headers, "paypal-cert-url"), self.certificate_rule
        )
        signature = certificates.signature_bytes(
            base.required_header(headers, "paypal-transmission-sig"), "PAYPAL-TRANSMISSION-SIG"
        )
        signed = signed_string(transmission_id, time_text, self.webhook_id, delivery.body)
        self.verify_with_certificate(url, secrets, signed, signature, digest="sha256", now=now)
        base.check_fresh(timestamp, now, tolerance)
        return Verified(timestamp=timestamp)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        return [
            Identity(
                # Covered by the signature only through the body's CRC-32 (module docstring).
                event_id=base.bounded_text(payload.get("id"), "id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(
                    payload.get("event_type"), "event_type", base.MAX_TYPE_CHARS
                ),
                delivery_id=base.optional_header(delivery.headers, "paypal-transmission-id"),
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
        """``body`` as PayPal would send it, signed with a development pin."""
        import uuid

        pin, private_key = self.signing_pin(secret)
        transmission_id = str(uuid.uuid4())
        time_text = datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        message = signed_string(transmission_id, time_text, self.webhook_id, body)
        signature = certificates.sign_rsa(private_key, message, digest="sha256")
        headers = {
            "PAYPAL-AUTH-ALGO": ALGORITHM,
            "PAYPAL-CERT-URL": pin.url,
            "PAYPAL-TRANSMISSION-ID": transmission_id,
            "PAYPAL-TRANSMISSION-SIG": base64.b64encode(signature).decode(),
            "PAYPAL-TRANSMISSION-TIME": time_text,
        }
        return Signed(headers, body, url)
