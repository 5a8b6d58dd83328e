"""Who may talk to the console: the rules a local web server follows (Jupyter's).

The console listens on 127.0.0.1 only, yet every page a browser has open can send requests
there, and a DNS name that rebinds to 127.0.0.1 makes another site's page same-origin with it.
So, in this order, for every request:

1. the ``Host`` header must name this server (``127.0.0.1:PORT`` or ``localhost:PORT``): a
   rebinding attacker's page sends its own host name;
2. a cross-site request is refused: ``Origin``, when sent, must be this server's, and
   ``Sec-Fetch-Site`` must be ``same-origin`` or ``none`` (typed or bookmarked) — another port on
   localhost is ``same-site`` and is refused too; a POST (every action) must carry an ``Origin``;
3. the caller must hold the one-time token: in the URL the console printed (``?token=…``), which
   is then exchanged for a cookie (HttpOnly, SameSite=Strict) and dropped from the address bar by
   a redirect, or in that cookie. Both compared in constant time.

Nothing here reads a body or knows a page: :func:`check` is a pure function of the request line
and its headers.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit

TOKEN_PARAMETER = "token"  # noqa: S105 - the query parameter's name, not a secret
# Browsers send no Sec-Fetch-Site for a typed URL in some versions and "none" in others.
_SAFE_FETCH_SITES = frozenset({"same-origin", "none"})


class Headers(Protocol):
    """Request headers looked up case-insensitively (http.server's message object)."""

    def get(self, name: str, /) -> str | None: ...


@dataclass(frozen=True)
class Verdict:
    """What to do with a request: serve it (``status`` 0), redirect it (303, with a cookie) or
    refuse it (``status`` and ``reason``)."""

    status: int = 0
    reason: str = ""
    location: str | None = None
    set_cookie: str | None = None

    @property
    def allowed(self) -> bool:
        return self.status == 0


class Gate:
    def __init__(self, port: int, token: str | None = None) -> None:
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        # The port in the name: two consoles on one machine keep their own cookies.
        self.cookie_name = f"webhook_inbox_console_{port}"
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        self.origins = frozenset(f"http://{host}" for host in self.hosts)

    def url(self, path: str = "/") -> str:
        """The URL to print and open: the token in it, once."""
        return f"http://127.0.0.1:{self.port}{path}?{urlencode({TOKEN_PARAMETER: self.token})}"

    def _holds(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def check(self, method: str, target: str, headers: Headers) -> Verdict:
        """The verdict on a request."""
        refusal = self._where_from(method, headers)
        if refusal:
            return Verdict(403, refusal)
        parts = urlsplit(target)
        query = parse_qsl(parts.query, keep_blank_values=True)
        offered = [value for name, value in query if name == TOKEN_PARAMETER]
        if offered:
            if not (method == "GET" and self._holds(offered[-1])):
                return Verdict(403, "wrong token: open the URL the console printed")
            rest = urlencode([(n, v) for n, v in query if n != TOKEN_PARAMETER])
            return Verdict(
                303,
                location=parts.path + (f"?{rest}" if rest else ""),
                set_cookie=(f"{self.cookie_name}={self.token}; HttpOnly; SameSite=Strict; Path=/"),
            )
        if self._holds(self._cookie(headers.get("Cookie"))):
            return Verdict()
        return Verdict(403, "no token: open the URL the console printed (it holds the token)")

    def _where_from(self, method: str, headers: Headers) -> str | None:
        """Why a request's host or origin is refused, or None (rules 1 and 2)."""
        host = (headers.get("Host") or "").strip().lower()
        if host not in self.hosts:
            return "this console answers only to 127.0.0.1 and localhost"
        origin = headers.get("Origin")
        if origin is not None and origin not in self.origins:
            return "cross-origin requests are refused"
        fetch_site = headers.get("Sec-Fetch-Site")
        if fetch_site is not None and fetch_site not in _SAFE_FETCH_SITES:
            return "cross-site requests are refused"
        if method not in {"GET", "HEAD"} and origin is None:
            return "an action must come from the console's own page (no Origin)"
        return None

    def _cookie(self, header: str | None) -> str | None:
        if not header:
            return None
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(header)
        except CookieError:
            return None
        morsel = jar.get(self.cookie_name)
        return morsel.value if morsel is not None else None
