"""What the answers to unsigned handshakes are made of: the query string a challenge arrives
in, the plain tokens an answer may echo or key, and the echo itself (``text/plain``,
``nosniff``). Shared by the schemes whose endpoint answers a challenge (challenges.py,
shared_tokens.py, braintree.py)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from webhook_inbox.errors import InvalidPayload
from webhook_inbox.ingest.schemes.base import Delivery, Reply

NOSNIFF = (("X-Content-Type-Options", "nosniff"),)
_TOKEN_CHARS = re.compile(r"[!#-;=?-Z\\^-z|~]+")  # printable ASCII less " < > [ ] { } and space


def echo(challenge: str) -> Reply:
    """A challenge sent back as the whole body, as text the browser must not sniff."""
    return Reply(challenge, 200, "text/plain", NOSNIFF)


def query_parameters(url: str) -> dict[str, str]:
    """The query string of the URL the sender called, decoded, a repeated name's last value
    (as API Gateway keeps it); a malformed one is no parameter at all."""
    try:
        query = urlsplit(url).query
        pairs = parse_qsl(query, keep_blank_values=True, errors="strict", max_num_fields=64)
    except (ValueError, UnicodeDecodeError):
        return {}
    return dict(pairs)


def handshake_token(value: str | None, what: str, limit: int = 512, *, spaces: bool = False) -> str:
    """A challenge a handshake echoes or keys an answer with: printable ASCII without quotes,
    braces, brackets or angle brackets (and without spaces unless ``spaces``: Microsoft Graph's
    validation tokens are a sentence), at most ``limit`` characters, else 400.

    Echoed as text it cannot become markup; keyed into an HMAC (X's CRC) it cannot be a JSON
    object or array, so the answer is never the signature of a body ingest would accept."""
    checked = value.replace(" ", "") if value and spaces else value
    if not value or len(value) > limit or not checked or not _TOKEN_CHARS.fullmatch(checked):
        raise InvalidPayload(f"{what} is missing, too long or not a plain token")
    return value


def get_parameter(delivery: Delivery, name: str) -> str | None:
    """The query parameter ``name`` of a GET (None for any other method or without it)."""
    if delivery.method != "GET":
        return None
    return query_parameters(delivery.url).get(name)
