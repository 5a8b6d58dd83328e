"""The local API Gateway: many HTTP connections in, one request at a time per ingest environment.

API Gateway accepts any number of connections and invokes Lambda once per request; each
execution environment handles one invocation at a time and there are as many environments as
the concurrency allows. This gateway does the same: a thread per connection (an idle keep-alive
client holds a thread, never an environment), and each request borrows an idle ingest worker
(its own process, its own database connection) for exactly one invocation. Requests beyond the
pool's size wait for a worker, as a throttled burst would wait for a provider's retry.

``POST /operator/read`` and ``/operator/act`` are the operator function's two Function URLs
(one execution environment each): the gateway stands in for IAM, taking the caller to be the
local user (``local:$USER``) and checking no signature, as only loopback reaches it.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.cli.params import operator_name
from webhook_inbox_tools.dev.apigw import (
    apigw_response_to_http,
    function_url_event,
    http_to_apigw_v2,
)
from webhook_inbox_tools.dev.explain import explain
from webhook_inbox_tools.dev.workers import INGEST_TIMEOUT_S, OPERATOR_TIMEOUT_S, say

ROUTE = re.compile(r"^/webhooks/([^/?]+)$")
OPERATOR_ROUTE = re.compile(r"^/operator/(read|act)/?$")
LAMBDA_SYNC_PAYLOAD_BYTES = 6 * 1024 * 1024
# An idle keep-alive connection is closed after this long, as API Gateway does (its idle
# timeout is 350 s; shorter here so a forgotten client does not hold a thread for long).
IDLE_CONNECTION_TIMEOUT_S = 60.0
_JSON = {"content-type": "application/json"}
Outcome = dict[str, Any] | None  # the ingest outcome's summary (dev.explain.OUTCOME_FIELDS)


def _message(text: str) -> bytes:
    return json.dumps({"message": text}).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A burst of senders connects at once; the default backlog (5) resets the excess.
    request_queue_size = 128


class IngestGateway:
    """Listens from construction, so a taken port or a foreign address fails before anything
    else starts; serves once :meth:`start` hands it the ingest workers."""

    def __init__(self, host: str, port: int) -> None:
        self._idle: queue.Queue[Connection] = queue.Queue()
        # Environments handed over and not taken back, idle or busy: a reload waits for these
        # only, so after a failed start (none in service) it restarts at once.
        self._in_service = 0
        self._lock = threading.Lock()
        # Why no environment serves (the code does not import): answered at once with a 503.
        self.broken: str | None = None
        # Called with (provider name, status, outcome) for every delivery not answered 2xx.
        self.on_refused: Callable[[str, int, Outcome], None] | None = None
        # The operator function's environments by level, and who calls them (the local user).
        self._operators: dict[str, queue.Queue[Connection]] = {}
        self.operator_caller = f"local:{operator_name(None)}"
        try:
            self._server = _Server((host, port), self._handler_class())
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (--host / --port)"
            ) from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(
        self, workers: list[Connection], operators: dict[str, Connection] | None = None
    ) -> None:
        self.add_workers(workers)
        for level, channel in (operators or {}).items():
            old = self._operators.get(level)
            while old is not None and not old.empty():  # the environment a reload replaced
                old.get_nowait().close()
            self._operators[level] = queue.Queue()
            self._operators[level].put(channel)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
            )
            self._thread.start()

    def add_workers(self, workers: list[Connection]) -> None:
        with self._lock:
            self._in_service += len(workers)
        for channel in workers:
            self._idle.put(channel)

    def take_workers(self, count: int, timeout: float) -> list[Connection]:
        """Take ``count`` environments out of service, waiting for busy ones to answer first
        (a reload must not cut an invocation short); those still busy at ``timeout`` are left
        to answer into a closed pipe. Requests meanwhile wait for :meth:`add_workers`."""
        deadline = time.monotonic() + timeout
        taken: list[Connection] = []
        with self._lock:
            wanted, self._in_service = min(count, self._in_service), 0
        while len(taken) < wanted:
            try:
                taken.append(self._idle.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return taken

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def invoke(self, event: dict[str, Any]) -> tuple[int, dict[str, str], bytes, Outcome]:
        """One invocation on an idle ingest environment, as API Gateway's integration makes it,
        and the ingest outcome's summary (None for an answer the gateway gave itself)."""
        broken = self.broken
        if broken is not None:
            body = json.dumps({"message": "Service Unavailable", "dev": broken}).encode()
            return 503, {**_JSON, "Retry-After": "1"}, body, None
        try:
            channel = self._idle.get(timeout=INGEST_TIMEOUT_S)
        except queue.Empty:
            return 503, _JSON, _message("Service Unavailable"), None
        try:
            channel.send(event)
            if not channel.poll(INGEST_TIMEOUT_S + 5):
                # The environment is stuck mid-invocation: its late answer would be read by the
                # next request, so it never goes back into the pool.
                return 503, _JSON, _message("Service Unavailable"), None
            response, outcome = channel.recv()
        except (EOFError, OSError):
            return 502, _JSON, _message("Internal Server Error"), None  # the worker died
        self._idle.put(channel)
        if response is None:  # the handler raised (the worker printed the traceback)
            return 500, _JSON, _message("Internal Server Error"), None
        return (*apigw_response_to_http(response), outcome)

    def invoke_operator(
        self, level: str, event: dict[str, Any]
    ) -> tuple[int, dict[str, str], bytes]:
        """One invocation of the operator function at ``level``, as its Function URL makes it."""
        pool = self._operators.get(level)
        if pool is None:
            return 503, _JSON, _message("Service Unavailable")
        try:
            channel = pool.get(timeout=OPERATOR_TIMEOUT_S)
        except queue.Empty:
            return 429, _JSON, _message("Too Many Requests")  # its one environment is busy
        try:
            channel.send(event)
            if not channel.poll(OPERATOR_TIMEOUT_S + 5):
                return 502, _JSON, _message("Internal Server Error")  # never back in the pool
            response, _ = channel.recv()
        except (EOFError, OSError):
            return 502, _JSON, _message("Internal Server Error")
        pool.put(channel)
        if response is None:  # the handler raised: Lambda answers a Function URL with 502
            return 502, _JSON, _message("Internal Server Error")
        return apigw_response_to_http(response)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Gateway(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = IDLE_CONNECTION_TIMEOUT_S

            def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in {"content-length", "connection"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client left first: nothing to answer

            def do_GET(self) -> None:
                # The deployed HTTP API routes GET /webhooks/{provider} too: senders' challenges.
                if ROUTE.match(self.path.partition("?")[0]):
                    self._deliver("GET")
                    return
                self._reply(404, _JSON, _message("Not Found"))

            def do_POST(self) -> None:
                self._deliver("POST")

            def _deliver(self, method: str) -> None:
                path, _, query = self.path.partition("?")
                match = ROUTE.match(path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                operator = OPERATOR_ROUTE.match(path) if method == "POST" else None
                if operator:
                    self._operator(operator[1], path, query, body)
                    return
                if not match:
                    say("ingest", f"POST {path} -> 404: {explain(404, None, provider='')}")
                    self._reply(404, _JSON, _message("Not Found"))
                    return
                if length > LAMBDA_SYNC_PAYLOAD_BYTES:
                    say("ingest", f"POST {path} -> 413: {explain(413, None, provider='')}")
                    # Recorded before the answer: once a sender has it, so has the database.
                    if gateway.on_refused is not None:
                        gateway.on_refused(match[1], 413, None)
                    self._reply(413, _JSON, _message("Request Entity Too Large"))
                    return
                event = http_to_apigw_v2(
                    method=method,
                    path=path,
                    query=query,
                    headers=self.headers.items(),
                    body=body,
                    source_ip=self.client_address[0],
                    route_key=f"{method} /webhooks/{{provider}}",
                    path_parameters={"provider": match[1]},
                    proto="http",
                )
                started = time.monotonic()
                status, headers, out, outcome = gateway.invoke(event)
                elapsed = (time.monotonic() - started) * 1000
                why = explain(status, outcome, provider=match[1])
                say(
                    "ingest",
                    f"{method} {path} -> {status} ({elapsed:.0f} ms)" + (f": {why}" if why else ""),
                )
                if status >= 300 and gateway.on_refused is not None:
                    gateway.on_refused(match[1], status, outcome)  # before the answer, as above
                self._reply(status, headers, out)

            def _operator(self, level: str, path: str, query: str, body: bytes) -> None:
                event = function_url_event(
                    path=path,
                    query=query,
                    headers=self.headers.items(),
                    body=body,
                    source_ip=self.client_address[0],
                    caller=gateway.operator_caller,
                )
                started = time.monotonic()
                status, headers, out = gateway.invoke_operator(level, event)
                elapsed = (time.monotonic() - started) * 1000
                say("operator", f"POST {path} -> {status} ({elapsed:.0f} ms)")
                self._reply(status, headers, out)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: one line per request is printed above."""

        return Gateway
