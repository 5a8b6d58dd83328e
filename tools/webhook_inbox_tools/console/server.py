"""The console's HTTP server: the standard library's threaded server on 127.0.0.1, every request
through the gate (:mod:`.guard`) before any page (:mod:`.pages`) sees it.

Each response carries a Content-Security-Policy that allows only this origin's scripts and
styles (no inline script, no eval: htmx's eval features are off in the page's htmx-config), no
framing, no referrer (the first URL holds the token), and no caching of pages that show data.
Request bodies are small forms, capped; the log line of a request is its method, path (never
its query, which may hold the token) and status — never a payload.
"""

from __future__ import annotations

import sys
import threading
import traceback
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from webhook_inbox_tools.console.guard import Gate
from webhook_inbox_tools.console.pages import Pages, Reply

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
MAX_FORM_BYTES = 64 * 1024
_STATIC_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".png": "image/png",
}


def static_file(name: str) -> tuple[bytes, str] | None:
    """A file shipped in the package's static folder, or None (no path outside it)."""
    parts = name.split("/")
    if not name or any(p in {"", ".", ".."} or p.startswith(".") for p in parts):
        return None
    suffix = "." + parts[-1].rsplit(".", 1)[-1] if "." in parts[-1] else ""
    if suffix not in _STATIC_TYPES:
        return None
    node = resources.files("webhook_inbox_tools.console") / "static"
    for part in parts:
        node = node / part
    if not node.is_file():
        return None
    return node.read_bytes(), _STATIC_TYPES[suffix]


class ConsoleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: Pages, port: int = 0, *, quiet: bool = False) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.pages = pages
        self.gate = Gate(self.server_address[1])
        self.quiet = quiet

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> threading.Thread:
        """Serve on a thread of its own (tests, and the command while it waits for Ctrl-C)."""
        thread = threading.Thread(target=self.serve_forever, name="console", daemon=True)
        thread.start()
        return thread


class _Handler(BaseHTTPRequestHandler):
    server: ConsoleServer
    server_version = "webhook-inbox-console"
    sys_version = ""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        verdict = self.server.gate.check(method, self.path, self.headers)
        if not verdict.allowed:
            headers = {"Location": verdict.location} if verdict.location else {}
            if verdict.set_cookie:
                headers["Set-Cookie"] = verdict.set_cookie
            body = verdict.reason.encode() if verdict.reason else b""
            self._send(verdict.status, body, "text/plain; charset=utf-8", headers, method)
            return
        path = urlsplit(self.path).path
        if path.startswith("/static/"):
            found = static_file(path.removeprefix("/static/"))
            if found is None:
                self._send(404, b"not found", "text/plain; charset=utf-8", {}, method)
                return
            body, content_type = found
            # Vendored files carry their version in their name; ours change with the package.
            self._send(200, body, content_type, {"Cache-Control": "private, max-age=300"}, method)
            return
        form: list[tuple[str, str]] = []
        if method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_FORM_BYTES:
                self._send(413, b"form too large", "text/plain; charset=utf-8", {}, method)
                return
            raw = self.rfile.read(length).decode("utf-8", "replace")
            form = parse_qsl(raw, keep_blank_values=True)
        try:
            reply = self.server.pages.dispatch(
                method, self.path, form, partial=self.headers.get("HX-Request") == "true"
            )
        except Exception as exc:  # noqa: BLE001 - a bug in a page: answer 500, keep serving
            # The kind and where, not the message: it could quote what the page was showing.
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            where = f"{Path(frame.filename).name}:{frame.lineno}"
            print(f"console | {method} {path} failed: {type(exc).__name__} at {where}",
                  file=sys.stderr)  # fmt: skip
            reply = Reply(500, "the console failed on this page: its terminal says where")
            reply.content_type = "text/plain; charset=utf-8"
        self._reply(reply, method)

    def _reply(self, reply: Reply, method: str) -> None:
        headers = {"Cache-Control": "no-store", **reply.headers}
        self._send(reply.status, reply.body.encode(), reply.content_type, headers, method)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str], method: str
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(body)

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        if self.server.quiet:
            return
        status = code.value if isinstance(code, HTTPStatus) else code
        # The path only: the query may hold the token or an operator's search.
        path = urlsplit(self.path).path
        print(f"console | {self.command} {path} -> {status}", file=sys.stderr, flush=True)

    def log_message(self, format: str, *args: Any) -> None:
        # http.server's own lines quote the raw request line, which may hold the token: the
        # request lines above say enough.
        return
