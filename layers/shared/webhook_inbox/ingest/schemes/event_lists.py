"""Body-HMAC senders whose delivery is a list of events, and whose empty list means something:
Asana (a heartbeat; its first request a handshake carrying the secret) and Xero (the
intent-to-receive check).

Neither sends an event id. Each event object is its own row, keyed by its content
(:func:`base.content_digest_id`: canonical JSON with the type), so the same event redelivered,
alone or in another batch, is a duplicate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, InvalidPayload
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Verified
from webhook_inbox.ingest.schemes.hmac_family import GenericHmac, _Preset

HANDSHAKE_HEADER = "x-hook-secret"
HANDSHAKE_TYPE = "handshake"
MAX_HOOK_SECRET_CHARS = 256


def _events(payload: Any) -> list[Mapping[str, Any]]:
    events = payload.get("events") if isinstance(payload, Mapping) else None
    if not isinstance(events, list) or not all(isinstance(e, Mapping) for e in events):
        raise InvalidPayload("events is missing or not a list of objects")
    return events


def _text(event: Mapping[str, Any], path: str) -> str:
    return base.bounded_text(base.json_path(event, path), path, base.MAX_TYPE_CHARS)


class Asana(_Preset):
    """Asana: ``X-Hook-Signature: <hex HMAC-SHA256 of the body>`` keyed with the webhook's
    secret, which Asana sends once, unsigned, in the ``X-Hook-Secret`` header of the request
    that creates the webhook; the answer must echo it in the same header.

    Who may set the secret is the trust decision. By default the handshake is answered only
    when its ``X-Hook-Secret`` equals a secret the provider already holds (a re-handshake, or a
    secret put in beforehand): nothing at runtime can add a secret. With the option
    ``accept_handshake: true`` (only for the minute the webhook is created) any handshake is
    answered and stored as an event of type ``handshake`` whose payload holds the secret, for
    the operator to read (``events show``) and put in with ``providers rotate``; whoever posts a
    handshake in that minute can add a row, never a secret.

    ``{"events": []}`` (Asana's heartbeat) is answered 200 and stores nothing. Each event's type
    is ``resource.resource_type`` and ``action`` (``task.changed``).
    """

    name = "asana"
    accepted_status = 200
    unsigned_handshakes = True
    own_options: ClassVar[frozenset[str]] = frozenset({"accept_handshake"})
    preset: ClassVar[dict[str, str]] = {"signature_header": "X-Hook-Signature"}

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - self.own_options
        if unknown:
            raise ConfigurationError(f"{self.name}: unknown option(s) {sorted(unknown)}")
        accept = options.get("accept_handshake", False)
        if not isinstance(accept, bool):
            raise ConfigurationError(f"{self.name}: accept_handshake is true or false")
        GenericHmac.__init__(self, self.preset)
        self.accept_handshake = accept

    @staticmethod
    def _hook_secret(delivery: Delivery) -> str | None:
        if "x-hook-signature" in delivery.headers or HANDSHAKE_HEADER not in delivery.headers:
            return None
        value = delivery.headers[HANDSHAKE_HEADER]
        if not value or len(value) > MAX_HOOK_SECRET_CHARS or not value.isprintable():
            raise base.fail("X-Hook-Secret is empty, too long or not printable")
        return value

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        secret = self._hook_secret(delivery)
        if secret is None:
            return None
        presented = [base.token_digest(secret)]
        if base.any_match([base.token_digest(s) for s in secrets], presented):
            return self._echo(secret)
        if self.accept_handshake:
            return None  # verify() lets it through, identify() stores it
        raise AuthenticationFailed("X-Hook-Secret is not one of the provider's secrets")

    @staticmethod
    def _echo(secret: str) -> Reply:
        return Reply("", 200, "text/plain", (("X-Hook-Secret", secret),))

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        secret = self._hook_secret(delivery) if self.accept_handshake else None
        if secret is not None:
            return Verified(payload={"x_hook_secret": secret})
        return super().verify(delivery, secrets, now=now, tolerance=tolerance)

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        # Only verify()'s handshake pass-through has no secret: a signed body never lands here.
        if verified.secret is None and set(payload) == {"x_hook_secret"}:
            secret = payload["x_hook_secret"]
            event_id = base.body_digest_id(HANDSHAKE_TYPE, secret.encode())
            return [Identity(event_id=event_id, event_type=HANDSHAKE_TYPE, payload=payload)]
        events = _events(payload)
        if not events:
            return Reply.json({"status": "heartbeat"})
        found = []
        for event in events:
            kind = f"{_text(event, 'resource.resource_type')}.{_text(event, 'action')}"
            event_type = base.bounded_text(kind, "event type", base.MAX_TYPE_CHARS)
            event_id = base.content_digest_id(event_type, event, without=())
            found.append(Identity(event_id=event_id, event_type=event_type, payload=dict(event)))
        return found

    def acknowledge(self, payload: Any, *, new: bool) -> Reply | None:
        if isinstance(payload, Mapping) and set(payload) == {"x_hook_secret"}:
            return self._echo(payload["x_hook_secret"])
        return super().acknowledge(payload, new=new)


class Xero(_Preset):
    """Xero: ``x-xero-signature: <base64 HMAC-SHA256 of the body>`` keyed with the webhook key.

    Every answer has an empty body (Xero's rule, 401s included). The intent-to-receive
    deliveries (``"events": []``) are answered 200 when signed, 401 when not, and store nothing.
    Each event's type is ``eventCategory.eventType`` (``INVOICE.UPDATE``).
    """

    name = "xero"
    accepted_status = 200
    empty_answers = True
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "x-xero-signature",
        "encoding": "base64",
    }

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        events = _events(payload)
        if not events:
            return Reply("", 200, "text/plain")  # intent to receive: signed, so 200
        found = []
        for event in events:
            kind = f"{_text(event, 'eventCategory')}.{_text(event, 'eventType')}"
            event_type = base.bounded_text(kind, "event type", base.MAX_TYPE_CHARS)
            event_id = base.content_digest_id(event_type, event, without=())
            found.append(Identity(event_id=event_id, event_type=event_type, payload=dict(event)))
        return found
