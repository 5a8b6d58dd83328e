"""DocuSign Connect: ``X-DocuSign-Signature-1`` (``-2``, … one per active HMAC key) = base64
HMAC-SHA256 of the raw body."""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import SignatureMismatch
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified

_SIGNATURE_HEADER = re.compile(r"x-docusign-signature-[1-9][0-9]{0,2}")
# Fields that change from one delivery attempt of the same event to the next.
_PER_ATTEMPT = ("retryCount",)


class DocuSign(Scheme):
    """DocuSign Connect (JSON, SIM event model). Connect signs the body once per active HMAC
    key of the account and sends each as ``X-DocuSign-Signature-<n>``; a delivery verifies when
    any of them matches any configured key (the key as DocuSign shows it, used as UTF-8: it
    looks like base64 but is not decoded). No timestamp is signed: a captured delivery verifies
    forever and is only deduplicated.

    Connect sends no event id and bumps ``retryCount`` on every retry, so the key is the digest
    of the type and the body in canonical JSON without ``retryCount``; the type is the body's
    ``event`` (``envelope-completed``). Connect counts only 200 as success."""

    name = "docusign"
    uses_timestamp = False
    accepted_status = 200

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        names = sorted(n for n in delivery.headers if _SIGNATURE_HEADER.fullmatch(n))
        if not names:
            raise base.fail("missing header x-docusign-signature-1")
        if len(names) > base.MAX_SIGNATURES_PER_HEADER:
            raise base.fail("too many signature headers")
        presented = [base.b64_digest(base.required_header(delivery.headers, n)) for n in names]
        matched = base.match_index(
            [base.compute_mac(s.encode(), delivery.body) for s in secrets], presented
        )
        if matched is None:
            raise SignatureMismatch("no X-DocuSign-Signature matched")
        return Verified(secret=secrets[matched])

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
        mac = base.compute_mac(secret.encode(), body)
        headers = {
            "X-DocuSign-Signature-1": base64.b64encode(mac).decode(),
            "X-Authorization-Digest": "HMACSHA256",
        }
        return Signed(headers, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        event = base.bounded_text(payload.get("event"), "event", base.MAX_TYPE_CHARS)
        return [
            Identity(
                event_id=base.content_digest_id(event, payload, without=_PER_ATTEMPT),
                event_type=event,
            )
        ]
