"""Body-HMAC senders whose endpoint must first answer a challenge: Meta (and WhatsApp), X's
CRC and Dropbox.

Each challenge arrives unsigned, as a ``GET`` with a query string, and is answered before any
signature is checked (:meth:`Scheme.handshake`); nothing about it is stored. What each one may
answer is narrow on purpose:

- Meta's ``hub.challenge`` is echoed only when ``hub.verify_token`` equals the provider's
  ``verify_token`` option (compared as digests, in constant time);
- X's ``crc_token`` is answered with an HMAC keyed by the consumer secret, to anyone who asks (X
  gives the request nothing to check). That makes the endpoint an HMAC oracle, so the token must
  be plain (:func:`handshake_answers.handshake_token`: no braces, brackets or quotes): its HMAC
  can never be the signature of a JSON body ingest would accept;
- Dropbox's ``challenge`` is echoed as ``text/plain`` with ``X-Content-Type-Options: nosniff``,
  as Dropbox asks, to anyone (it is only an echo, bounded and free of markup characters).

The deliveries after the handshake are HMAC-SHA256 of the raw body (Meta ``sha256=`` + hex, X
``sha256=`` + base64, Dropbox bare hex), with no timestamp and no event id: the key is the body
digest with the type, and a captured delivery verifies forever (it is only deduplicated).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from webhook_inbox.errors import AuthenticationFailed, ConfigurationError, InvalidPayload
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Reply, Verified
from webhook_inbox.ingest.schemes.handshake_answers import (
    echo,
    get_parameter,
    handshake_token,
    query_parameters,
)
from webhook_inbox.ingest.schemes.hmac_family import GenericHmac, _Preset


class Meta(_Preset):
    """Meta webhooks (Facebook, Instagram, WhatsApp Business): ``X-Hub-Signature-256:
    sha256=<hex HMAC-SHA256 of the body>`` keyed with the app secret, answered 200.

    The subscription's ``GET ?hub.mode=subscribe&hub.challenge=…&hub.verify_token=…`` is
    answered with the challenge when the verify token matches the ``verify_token`` option (the
    string typed into the app dashboard; it only gates this echo and signs nothing). The type is
    the body's ``object``, refined by the changes' ``field`` when every change names the same
    one (``whatsapp_business_account.messages``); Meta sends no event id, so the key is the body
    digest with that type.
    """

    name = "meta"
    accepted_status = 200
    unsigned_handshakes = True
    own_options: ClassVar[frozenset[str]] = frozenset({"verify_token"})
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Hub-Signature-256",
        "prefix": "sha256=",
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = set(options) - self.own_options
        if unknown:
            raise ConfigurationError(f"{self.name}: unknown option(s) {sorted(unknown)}")
        token = options.get("verify_token")
        if token is not None and (not isinstance(token, str) or not token):
            raise ConfigurationError(f"{self.name}: verify_token is a non-empty string")
        GenericHmac.__init__(self, self.preset)
        self.verify_token_digest = base.token_digest(token) if token else None

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        mode = get_parameter(delivery, "hub.mode")
        if mode is None:
            return None  # not a subscription request: verified (and refused) as a delivery
        if mode != "subscribe":
            raise InvalidPayload("hub.mode is not subscribe")
        presented = query_parameters(delivery.url).get("hub.verify_token") or ""
        expected = self.verify_token_digest
        # Compared as digests even when no token is configured, so the answer's timing says
        # nothing either way.
        matched = base.any_match(
            [expected or base.token_digest("\x00unset")], [base.token_digest(presented)]
        )
        if expected is None or not presented or not matched:
            raise AuthenticationFailed("hub.verify_token did not match", reason="signature")
        challenge = query_parameters(delivery.url).get("hub.challenge")
        return echo(handshake_token(challenge, "hub.challenge"))

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        kind = base.bounded_text(payload.get("object"), "object", base.MAX_TYPE_CHARS)
        entries = payload.get("entry")
        if not isinstance(entries, list) or not entries:
            raise InvalidPayload("entry is missing or not a non-empty list")
        fields = set()
        for entry in entries:
            changes = entry.get("changes") if isinstance(entry, Mapping) else None
            for change in changes if isinstance(changes, list) else ():
                if isinstance(change, Mapping) and isinstance(change.get("field"), str):
                    fields.add(change["field"])
        if len(fields) == 1:
            kind = base.bounded_text(f"{kind}.{fields.pop()}", "event type", base.MAX_TYPE_CHARS)
        return self.digest_identity(kind, delivery)


class WhatsApp(Meta):
    """WhatsApp Business Platform (Cloud API): Meta's scheme, under its own name."""

    name = "whatsapp"


class X(_Preset):
    """X (Twitter) Account Activity API: ``X-Twitter-Webhooks-Signature: sha256=<base64
    HMAC-SHA256 of the body>`` keyed with the app's consumer secret.

    The CRC (``GET ?crc_token=…``, at registration and hourly) is answered with
    ``{"response_token": "sha256=" + base64 HMAC-SHA256(consumer secret, crc_token)}`` keyed with
    the provider's first live secret. The type is the body's ``…_events`` key
    (``tweet_create_events``) or ``user_event``; X sends no event id: the key is the body digest
    with the type; ``for_user_id`` stays in the stored body.
    """

    name = "x"
    unsigned_handshakes = True
    accepted_status = 200
    preset: ClassVar[dict[str, str]] = {
        "signature_header": "X-Twitter-Webhooks-Signature",
        "prefix": "sha256=",
        "encoding": "base64",
    }

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        token = get_parameter(delivery, "crc_token")
        if token is None:
            return None
        crc = handshake_token(token, "crc_token")
        mac = base.compute_mac(secrets[0].encode(), crc.encode())
        return Reply.json({"response_token": "sha256=" + base64.b64encode(mac).decode()})

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        kinds = sorted(k for k in payload if k.endswith("_events") or k == "user_event")
        if not kinds:
            raise InvalidPayload("no …_events or user_event key")
        event_type = base.bounded_text("+".join(kinds), "event type", base.MAX_TYPE_CHARS)
        return self.digest_identity(event_type, delivery)


class Dropbox(_Preset):
    """Dropbox: ``X-Dropbox-Signature: <hex HMAC-SHA256 of the body>`` keyed with the app
    secret. ``GET ?challenge=…`` is echoed (text/plain, nosniff). A notification names only the
    accounts (``list_folder.accounts``) whose files changed: the type is the body's top-level
    keys other than the legacy ``delta`` (``list_folder``), the key the body digest with it."""

    name = "dropbox"
    unsigned_handshakes = True
    accepted_status = 200
    preset: ClassVar[dict[str, str]] = {"signature_header": "X-Dropbox-Signature"}

    def handshake(self, delivery: Delivery, secrets: Sequence[str]) -> Reply | None:
        challenge = get_parameter(delivery, "challenge")
        if challenge is None:
            return None
        return echo(handshake_token(challenge, "challenge"))

    def identify(
        self, delivery: Delivery, payload: Any, verified: Verified
    ) -> list[Identity] | Reply:
        kinds = sorted(k for k in payload if k != "delta" and isinstance(payload[k], Mapping))
        if not kinds:
            raise InvalidPayload("no notification object (list_folder)")
        event_type = base.bounded_text("+".join(kinds), "event type", base.MAX_TYPE_CHARS)
        return self.digest_identity(event_type, delivery)
