"""GitLab: a shared secret token in ``X-Gitlab-Token``, or (newer) a Standard Webhooks signature.

The classic secret token is sent verbatim and covers nothing: it proves the sender knows the
token, not what it sent, so anyone who sees one request (a proxy, a log) can forge any other.
GitLab's newer *signing token* signs like Standard Webhooks (``webhook-id``, equal to the
``Idempotency-Key`` header, ``.`` timestamp ``.`` body); option ``auth: signing-token``
verifies that, and then only that, with the ``standard-webhooks`` code.

No id is signed in the classic mode, so the key is the best one GitLab sends: ``Idempotency-Key``
(kept across retries and manual resends), else ``X-Gitlab-Event-UUID``, else a body digest with
the type.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_inbox.errors import ConfigurationError, SignatureMismatch
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.standard_webhooks import StandardWebhooks

AUTH_BY_TOKEN = "secret-token"  # noqa: S105 - an option value (GitLab's term), not a secret
AUTH_BY_SIGNING = "signing-token"


_digest = base.token_digest


class GitLab(Scheme):
    """GitLab webhooks. Type: ``X-Gitlab-Event`` (``Push Hook``), else the body's
    ``object_kind`` (``event_name`` for system hooks); ``X-Gitlab-Event-UUID`` is the delivery
    id. Option ``auth``: ``secret-token`` (default) or ``signing-token``."""

    name = "gitlab"
    option_names = frozenset({"auth"})

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        auth = self.options.get("auth", AUTH_BY_TOKEN)
        if auth not in {AUTH_BY_TOKEN, AUTH_BY_SIGNING}:
            raise ConfigurationError(f"gitlab: auth is {AUTH_BY_TOKEN!r} or {AUTH_BY_SIGNING!r}")
        self.signing = StandardWebhooks() if auth == AUTH_BY_SIGNING else None
        self.uses_timestamp = self.signing is not None

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        if self.signing is not None:
            self.signing.check_secret(secret)  # a whsec_ key

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        if self.signing is not None:
            # The signature only: a request with a valid X-Gitlab-Token but no signature is
            # refused, so the weaker mode cannot be chosen by whoever sends the request.
            return self.signing.verify(delivery, secrets, now=now, tolerance=tolerance)
        presented = [_digest(base.required_header(delivery.headers, "x-gitlab-token"))]
        matched = base.match_index([_digest(s) for s in secrets], presented)
        if matched is None:
            raise SignatureMismatch("token did not match")
        return Verified(secret=secrets[matched])

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        headers = delivery.headers
        raw_type = (
            headers.get("x-gitlab-event") or payload.get("object_kind") or payload.get("event_name")
        )
        event_type = base.bounded_text(raw_type, "X-Gitlab-Event", base.MAX_TYPE_CHARS)
        if verified.signed_id is not None:  # signing token: webhook-id (= Idempotency-Key)
            event_id = base.bounded_text(verified.signed_id, "webhook-id", base.MAX_ID_CHARS)
        elif headers.get("idempotency-key"):
            event_id = base.bounded_text(
                headers["idempotency-key"], "Idempotency-Key", base.MAX_ID_CHARS
            )
        elif headers.get("x-gitlab-event-uuid"):
            event_id = base.bounded_text(
                headers["x-gitlab-event-uuid"], "X-Gitlab-Event-UUID", base.MAX_ID_CHARS
            )
        else:
            event_id = base.body_digest_id(event_type, delivery.body)
        return [
            Identity(
                event_id=event_id,
                event_type=event_type,
                delivery_id=base.optional_header(headers, "x-gitlab-event-uuid"),
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
        """As GitLab sends it: ``event_id`` is the ``Idempotency-Key`` (a new UUID by default),
        ``event_type`` the ``X-Gitlab-Event`` header."""
        key = event_id or str(uuid.uuid4())
        headers = {"Idempotency-Key": key, "X-Gitlab-Event-UUID": str(uuid.uuid4())}
        if event_type:
            headers["X-Gitlab-Event"] = event_type
        if self.signing is not None:
            signed = self.signing.sign(secret, body, timestamp=timestamp, event_id=key)
            headers.update(signed.headers)
        else:
            headers["X-Gitlab-Token"] = secret  # the whole "signature": the secret itself
        return Signed(headers, body, url)
