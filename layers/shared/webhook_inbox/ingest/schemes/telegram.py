"""Telegram Bot API webhooks: a secret token in ``X-Telegram-Bot-Api-Secret-Token``; no
signature over the body."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from webhook_inbox.errors import ConfigurationError, SignatureMismatch
from webhook_inbox.ingest.schemes import base
from webhook_inbox.ingest.schemes.base import Delivery, Identity, Scheme, Signed, Verified

# setWebhook's secret_token: 1-256 characters, A-Z a-z 0-9 _ - only.
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


class Telegram(Scheme):
    """Telegram: the ``secret_token`` given to ``setWebhook`` comes back verbatim in
    ``X-Telegram-Bot-Api-Secret-Token`` and is compared in constant time (as SHA-256 digests,
    like GitLab's token). **It authenticates the sender, not the content**: nothing is signed,
    no timestamp, so whoever sees one request can forge any update.

    The body is one ``Update``: the key is its ``update_id`` (Telegram resends an update with
    the same id until it gets a 2xx), the type the one optional field it carries (``message``,
    ``callback_query``, …). Update ids are counted per bot: one provider per bot."""

    name = "telegram"
    uses_timestamp = False

    def check_secret(self, secret: str) -> None:
        if not _SECRET_TOKEN.fullmatch(secret):
            raise ConfigurationError(
                "telegram: a secret token is 1-256 characters of A-Z, a-z, 0-9, _ and -"
            )

    def verify(
        self, delivery: Delivery, secrets: Sequence[str], *, now: int, tolerance: int
    ) -> Verified:
        token = base.required_header(delivery.headers, "x-telegram-bot-api-secret-token")
        matched = base.match_index(
            [base.token_digest(s) for s in secrets], [base.token_digest(token)]
        )
        if matched is None:
            raise SignatureMismatch("secret token did not match")
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
        return Signed({"X-Telegram-Bot-Api-Secret-Token": secret}, body, url)

    def identify(self, delivery: Delivery, payload: Any, verified: Verified) -> list[Identity]:
        update_id = payload.get("update_id")
        if isinstance(update_id, bool) or not isinstance(update_id, int):
            update_id = None  # a number in the Bot API; anything else is a 400
        kinds = [key for key in payload if key != "update_id"]
        # "At most one of the optional parameters can be present in any given update."
        kind = kinds[0] if len(kinds) == 1 else None
        return [
            Identity(
                event_id=base.bounded_text(update_id, "update_id", base.MAX_ID_CHARS),
                event_type=base.bounded_text(kind, "update type", base.MAX_TYPE_CHARS),
            )
        ]
