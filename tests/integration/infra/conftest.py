"""A loopback HTTP server standing in for CloudFormation's pre-signed S3 response URL."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class ResponseRecorder:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_next: int = 0  # answer this many PUTs with 500 first
    arrived: threading.Event = field(default_factory=threading.Event)

    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.requests if r["status"] == 200]


@pytest.fixture
def response_url() -> Iterator[ResponseRecorder]:
    recorder = ResponseRecorder(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length).decode()
            status = 200
            if recorder.fail_next > 0:
                recorder.fail_next -= 1
                status = 500
            recorder.requests.append(
                {
                    "path": self.path,
                    "content_type": self.headers.get("Content-Type"),
                    "body": body,
                    "status": status,
                }
            )
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            if status == 200:
                recorder.arrived.set()

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}/cfn-response?X-Amz-Signature=abc"
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
