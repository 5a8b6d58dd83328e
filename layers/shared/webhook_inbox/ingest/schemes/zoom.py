"""Zoom: ``x-zm-signature: v0=<hex>`` over ``v0:{x-zm-request-timestamp}:{body}``, Slack's shape.

Zoom re-validates the endpoint (``endpoint.url_validation``) when it is saved and every 72 hours:
the answer is ``{"plainToken", "encryptedToken": hex HMAC-SHA256(secret, plainToken)}``. That is
a signing service for whoever can ask, so it is given only for a request whose own signature
verified, keyed with the secret that verified it, and never stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from webhook_inbox.errors import AuthenticationFailed
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Verified
from webhook_inbox.ingest.schemes.hmac_family import _Preset

URL_VALIDATION = "endpoint.url_validation"
MAX_PLAIN_TOKEN_CHARS = 256


class Zoom(_Preset):
    """Zoom: the type is the body's ``event``; Zoom sends no event id, so the key is the body
    digest with the type; ``x-zm-trackingid`` (unsigned) is the delivery id; new events are
    answered 200 (Zoom documents 200 or 204)."""

    name = "zoom"
    accepted_status = 200
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "x-zm-signature",
        "prefix": "v0=",
        "timestamp_header": "x-zm-request-timestamp",
        "signed_content": "v0:{timestamp}:{body}",
    }

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        event = base.bounded_text(payload.get("event"), "event", base.MAX_TYPE_CHARS)
        if event == URL_VALIDATION:
            return self._validation_reply(payload, verified)
        return self.digest_identity(event, delivery, "x-zm-trackingid")

    @staticmethod
    def _validation_reply(payload: Mapping[str, Any], verified: Verified) -> Reply:
        if verified.secret is None:  # only a verified request may be answered
            raise AuthenticationFailed("url_validation without a verified secret")
        inner = payload.get("payload")
        plain = inner.get("plainToken") if isinstance(inner, Mapping) else None
        if not isinstance(plain, str):
            plain = None  # bounded_text would turn a number into text: Zoom sends a string
        token = base.bounded_text(plain, "payload.plainToken", MAX_PLAIN_TOKEN_CHARS)
        encrypted = base.compute_mac(verified.secret.encode(), token.encode()).hex()
        return Reply.json({"plainToken": token, "encryptedToken": encrypted})
