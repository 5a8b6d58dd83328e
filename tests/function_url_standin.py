"""A local stand-in for a stack's two operator Function URLs (AuthType AWS_IAM), for the CLI's
``--stack`` tests: a loopback HTTP server that does what Lambda's URL front does before the
function runs, then runs the real functions/operator/app.py in-process.

1. Authenticate: recompute the request's SigV4 signature with botocore from the secret of the
   access key it names (``known`` credentials) and compare; an unknown key or a wrong signature
   is a 403, as AWS answers it (its own body, not the function's).
2. Authorise: the principal of that key may call ``read``, or ``read`` and ``act`` (which
   policy it has); calling a URL it may not is a 403 ``{"Message": "Forbidden"}``.
3. Invoke the handler with a Function URL event whose ``requestContext.authorizer.iam`` names
   the principal (``userArn``); the handler raising is Lambda's 502.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support import FakeLambdaContext
from webhook_inbox import config
from webhook_inbox_tools.dev.apigw import apigw_response_to_http, function_url_event

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[^,]+), "
    r"Signature=(?P<sig>[0-9a-f]+)$"
)


@dataclass(frozen=True)
class Principal:
    arn: str
    secret: str
    levels: frozenset[str]


@dataclass
class StandIn:
    """The two URLs (``read_url``, ``act_url``) and what they saw."""

    app: ModuleType
    principals: dict[str, Principal]  # access key id -> principal
    region: str = "us-east-1"
    port: int = 0
    calls: list[tuple[str, int]] = field(default_factory=list)  # (level, status)
    hold: threading.Event | None = None  # set: requests wait for it (a function that hangs)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def read_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/read/"

    @property
    def act_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/act/"

    def verify(self, method: str, path: str, headers: Any, body: bytes) -> Principal | str:
        """The principal whose key signed this request, or why AWS would refuse it."""
        found = _AUTHORIZATION.match(headers.get("Authorization", ""))
        if found is None:
            return "Missing Authentication Token"
        principal = self.principals.get(found["key"])
        if principal is None:
            return "The security token included in the request is invalid."
        if (found["service"], found["region"]) != ("lambda", self.region):
            return f"Credential should be scoped to a valid region and service {found['service']}"
        signed = found["signed"].split(";")
        request = AWSRequest(
            method=method,
            url=f"http://127.0.0.1:{self.port}{path}",
            data=body,
            headers={name: headers.get(name, "") for name in signed},
        )
        request.context["timestamp"] = headers.get("X-Amz-Date", "")
        auth = SigV4Auth(Credentials(found["key"], principal.secret), "lambda", self.region)
        expected = auth.signature(
            auth.string_to_sign(request, auth.canonical_request(request)), request
        )
        if not hmac.compare_digest(expected, found["sig"]):
            return "The request signature we calculated does not match the signature you provided."
        return principal

    def invoke(self, level: str, principal: Principal, headers: Any, path: str, body: bytes) -> Any:
        with self._lock:  # one execution environment per function, as in dev
            os.environ["OPERATOR_LEVEL"] = level
            config.reset()
            event = function_url_event(
                path=path,
                query="",
                headers=headers.items(),
                body=body,
                source_ip="127.0.0.1",
                caller=principal.arn,
            )
            try:
                response = self.app.handler(event, FakeLambdaContext())
            except Exception:  # noqa: BLE001 - Lambda's answer to a function that raised
                return (
                    502,
                    {"content-type": "application/json"},
                    b'{"Message":"Internal Server Error"}',
                )
            return apigw_response_to_http(response)


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            level = self.path.strip("/")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if standin.hold is not None:
                standin.hold.wait(timeout=30)
            who = standin.verify("POST", self.path, self.headers, body)
            if isinstance(who, str):
                self._reply(403, {}, json.dumps({"message": who}).encode(), level)
                return
            if level not in who.levels:
                self._reply(403, {}, b'{"Message":"Forbidden"}', level)
                return
            status, headers, out = standin.invoke(level, who, self.headers, self.path, body)
            self._reply(status, headers, out, level)

        def _reply(self, status: int, headers: dict[str, str], body: bytes, level: str) -> None:
            standin.calls.append((level, status))
            self.send_response(status)
            self.send_header("Content-Type", headers.get("content-type", "application/json"))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)  # unless the client gave up first (a timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler


@contextmanager
def serving(standin: StandIn) -> Iterator[StandIn]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(standin))
    server.daemon_threads = True
    standin.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield standin
    finally:
        if standin.hold is not None:
            standin.hold.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
