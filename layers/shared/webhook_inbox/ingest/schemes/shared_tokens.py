"""Senders that sign nothing and authenticate with a shared value instead: Microsoft Graph
change notifications (``clientState`` inside each notification) and Okta event hooks (a header
of the user's choosing, ``Authorization`` by default).

A shared value proves who knew it, not what was sent: anyone who captured one delivery can send
any body with it. Such a delivery is only as trustworthy as the channel (TLS) and the value's
secrecy; there is no timestamp to bound a replay, only deduplication. Both compare the value as
a SHA-256 digest (:func:`base.token_digest`), so the time taken says nothing about its length
or content, and neither stores it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from webhook_inbox.errors import ConfigurationError, InvalidPayload, SignatureMismatch
from webhook_inbox.ingest import bodies
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Scheme, Signed, Verified
from webhook_inbox.ingest.schemes.handshake_answers import echo, handshake_token, query_parameters

MAX_VALIDATION_TOKEN_CHARS = 1024
MAX_CLIENT_STATE_CHARS = 255  # Graph's own limit on clientState


def _digests(secrets: Sequence[str]) -> list[bytes]:
    return [base.token_digest(s) for s in secrets]


class MicrosoftGraph(Scheme):
    """Microsoft Graph change notifications: ``{"value": [notification, …]}`` where every
    notification's ``clientState`` must equal one of the provider's secrets (the value given
    when the subscription was created; several during rotation).

    Subscription validation (``?validationToken=…`` on the notification or lifecycle URL, a
    POST) is answered with the decoded token as ``text/plain`` within Graph's 10 s, unsigned and
    unchecked, as Graph sends it with nothing to check: it is an echo, bounded and markup-free.
    Each notification is a row: type ``changeType`` (``created``) or, for a lifecycle
    notification, ``lifecycleEvent`` (``reauthorizationRequired``); key its content digest with
    that type; stored without ``clientState``. Rich notifications' ``validationTokens`` (JWTs)
    are not checked here.
    """

    name = "microsoft-graph"
    uses_timestamp = False
    unsigned_handshakes = True

    def check_secret(self, secret: str) -> None:
        super().check_secret(secret)
        if len(secret) > MAX_CLIENT_STATE_CHARS:
            raise ConfigurationError(f"{self.name}: clientState is at most 255 characters")

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        token = query_parameters(delivery.url).get("validationToken")
        if token is None:
            return None
        return echo(
            handshake_token(token, "validationToken", MAX_VALIDATION_TOKEN_CHARS, spaces=True)
        )

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        try:
            payload = bodies.json_object(delivery.body)
        except InvalidPayload as exc:
            # The credential is inside the body: a body that cannot be read has none (401).
            raise base.fail(f"no clientState: {exc.detail}") from None
        notifications = payload.get("value")
        if not isinstance(notifications, list) or not notifications:
            raise base.fail("value is missing or not a non-empty list")
        for notification in notifications:
            state = notification.get("clientState") if isinstance(notification, Mapping) else None
            if not isinstance(state, str) or not state:
                raise base.fail("a notification has no clientState")
            if not base.any_match(_digests(secrets), [base.token_digest(state)]):
                # Every one must match: a batch is not trusted in part.
                raise SignatureMismatch("clientState did not match")
        return Verified(payload=payload)

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        notifications = payload.get("value")
        if not isinstance(notifications, list) or not notifications:
            raise InvalidPayload("value is missing or not a non-empty list")
        found = []
        for notification in notifications:
            if not isinstance(notification, Mapping):
                raise InvalidPayload("a notification is not an object")
            kind = notification.get("lifecycleEvent") or notification.get("changeType")
            event_type = base.bounded_text(kind, "changeType", base.MAX_TYPE_CHARS)
            kept = {k: v for k, v in notification.items() if k != "clientState"}
            found.append(
                Identity(
                    event_id=base.content_digest_id(event_type, kept, without=()),
                    event_type=event_type,
                    payload=kept,
                )
            )
        return found

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
        """Sets ``clientState`` in each notification of ``body`` (a ``{"value": [...]}``
        document, or one notification, which is wrapped)."""
        document = base.object_to_sign(body) or {}
        value = document.get("value")
        items = value if isinstance(value, list) else [document]
        for item in items:
            if isinstance(item, dict):
                item["clientState"] = secret
        signed = json.dumps({"value": items}, separators=(",", ":"), ensure_ascii=False)
        return Signed({}, signed.encode(), url)


class Okta(Scheme):
    """Okta event hooks: the header configured on the hook (option ``header``, default
    ``Authorization``) must equal one of the provider's secrets, on every request.

    The one-time verification (a GET with ``X-Okta-Verification-Challenge``, which carries the
    same header) is answered ``{"verification": <challenge>}`` once that header matched. A
    delivery's ``data.events`` are its rows: key each event's ``uuid``, type its ``eventType``
    (``user.session.start``); the envelope's ``eventId`` is the delivery id.
    """

    name = "okta"
    uses_timestamp = False
    unsigned_handshakes = True
    accepted_status = 200
    option_names = frozenset({"header"})

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        header = self.options.get("header", "Authorization")
        if not isinstance(header, str) or not header:
            raise ConfigurationError(f"{self.name}: header is a header name")
        self.header_name = header
        self.header = header.lower()

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        challenge = delivery.headers.get("x-okta-verification-challenge")
        if delivery.method != "GET" or challenge is None:
            return None
        self.verify(delivery, secrets, now=0, tolerance=0)  # the same header, checked the same way
        token = handshake_token(challenge, "X-Okta-Verification-Challenge")
        return Reply.json({"verification": token})

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        value = base.required_header(delivery.headers, self.header)
        if not base.any_match(_digests(secrets), [base.token_digest(value)]):
            raise SignatureMismatch(f"{self.header_name} did not match")
        return Verified()

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        events = base.json_path(payload, "data.events")
        if not isinstance(events, list) or not events:
            raise InvalidPayload("data.events is missing or not a non-empty list")
        envelope_id = payload.get("eventId")
        delivery_id = (
            base.storable(envelope_id[: base.MAX_ID_CHARS], "eventId")
            if (isinstance(envelope_id, str) and envelope_id)
            else None
        )
        found = []
        for event in events:
            if not isinstance(event, Mapping):
                raise InvalidPayload("an event in data.events is not an object")
            found.append(
                Identity(
                    event_id=base.bounded_text(event.get("uuid"), "uuid", base.MAX_ID_CHARS),
                    event_type=base.bounded_text(
                        event.get("eventType"), "eventType", base.MAX_TYPE_CHARS
                    ),
                    delivery_id=delivery_id,
                    payload=dict(event),
                )
            )
        return found

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
        del timestamp, event_id, event_type  # Okta signs nothing: the header is the secret
        return Signed({self.header_name: secret}, body, url)
