"""The three functions, each in its own process as Lambda isolates them.

Each process loads the real ``functions/<name>/app.py`` with the environment the template would
give it, ignores SIGINT (the parent decides when to stop, so Ctrl-C never cuts a transaction in
half) and exits when the shared stop event is set or its parent disappears.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from multiprocessing.queues import Queue as MpQueue
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

from webhook_inbox_tools.dev.apigw import apigw_response_to_http, http_to_apigw_v2
from webhook_inbox_tools.dev.lambda_runtime import (
    LocalContext,
    failed_message_ids,
    load_handler,
    scheduled_event,
    sqs_event,
)

ROUTE = re.compile(r"^/webhooks/([^/?]+)$")
LAMBDA_SYNC_PAYLOAD_BYTES = 6 * 1024 * 1024


@dataclass(frozen=True)
class WorkerSettings:
    env: dict[str, str]
    functions_dir: str
    parent_pid: int
    region: str
    host: str
    port: int
    queue_url: str
    queue_arn: str
    batch_size: int
    processor_timeout_s: float
    sweep_every_s: float
    sweeper_timeout_s: float
    sweeper_rule_arn: str


def say(component: str, text: str) -> None:
    print(f"{component:<9}| {text}", flush=True)


class _WithoutMetricBlobs(io.TextIOBase):
    """stdout minus CloudWatch EMF documents (one JSON line per metric is noise on a console)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if not line.startswith('{"_aws"'):
                self._target.write(line + "\n")
        self._target.flush()
        return len(text)

    def flush(self) -> None:
        self._target.flush()


def _enter(settings: WorkerSettings) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(settings.env)
    if settings.env.get("POWERTOOLS_METRICS_DISABLED") == "true":
        sys.stdout = _WithoutMetricBlobs(sys.stdout)


def _orphaned(settings: WorkerSettings) -> bool:
    return os.getppid() != settings.parent_pid


# --- ingest: an HTTP server in front of the handler ----------------------------------------


def ingest_main(settings: WorkerSettings, stop: MpEvent, ready: MpQueue[Any]) -> None:
    _enter(settings)
    handler = load_handler(Path(settings.functions_dir), "ingest")

    class Gateway(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                if name.lower() not in {"content-length", "connection"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _not_found(self) -> None:
            self._reply(404, {"content-type": "application/json"}, b'{"message":"Not Found"}')

        def do_GET(self) -> None:
            self._not_found()

        def do_POST(self) -> None:
            path, _, query = self.path.partition("?")
            match = ROUTE.match(path)
            if not match:
                self._not_found()
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > LAMBDA_SYNC_PAYLOAD_BYTES:
                self.rfile.read(length)
                self._reply(413, {"content-type": "application/json"},
                            b'{"message":"Request Entity Too Large"}')  # fmt: skip
                return
            body = self.rfile.read(length)
            event = http_to_apigw_v2(
                method="POST",
                path=path,
                query=query,
                headers=self.headers.items(),
                body=body,
                source_ip=self.client_address[0],
                route_key="POST /webhooks/{provider}",
                path_parameters={"provider": match[1]},
            )
            started = time.monotonic()
            try:
                status, headers, out = apigw_response_to_http(
                    handler(event, LocalContext("IngestFunction", 30))
                )
            except Exception:  # noqa: BLE001 - as API Gateway does: a crashed integration is a 500
                traceback.print_exc()
                status, headers, out = (
                    500,
                    {"content-type": "application/json"},
                    b'{"message":"Internal Server Error"}',
                )
            elapsed = (time.monotonic() - started) * 1000
            say("ingest", f"POST {path} -> {status} ({elapsed:.0f} ms)")
            self._reply(status, headers, out)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: one line per request is printed above."""

    server = HTTPServer((settings.host, settings.port), Gateway)
    server.timeout = 0.2
    ready.put(("ingest", server.server_address[1]))
    try:
        while not stop.is_set() and not _orphaned(settings):
            server.handle_request()
    finally:
        server.server_close()


# --- processor: the SQS event source mapping -----------------------------------------------


def processor_main(settings: WorkerSettings, stop: MpEvent, ready: MpQueue[Any]) -> None:
    """Poll like the event source mapping: batches, partial failures, visibility, redrive."""
    _enter(settings)
    import boto3

    handler = load_handler(Path(settings.functions_dir), "processor")
    sqs = boto3.client("sqs", region_name=settings.region)
    ready.put(("processor", 0))
    while not stop.is_set() and not _orphaned(settings):
        reply = sqs.receive_message(
            QueueUrl=settings.queue_url,
            MaxNumberOfMessages=settings.batch_size,
            WaitTimeSeconds=1,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        batch: list[dict[str, Any]] = [dict(m) for m in reply.get("Messages", [])]
        if not batch:
            continue
        event = sqs_event(batch, settings.queue_arn, settings.region)
        try:
            response = handler(
                event, LocalContext("ProcessorFunction", settings.processor_timeout_s)
            )
        except Exception as exc:  # noqa: BLE001 - a raised error fails the whole batch in Lambda
            say("processor", f"handler raised {type(exc).__name__}: {exc}; whole batch retried")
            failed = {m["MessageId"] for m in batch}
        else:
            failed = failed_message_ids(response, batch)
        done = [m for m in batch if m["MessageId"] not in failed]
        if done:
            sqs.delete_message_batch(
                QueueUrl=settings.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)
                ],
            )
        note = f", {len(failed)} left for retry after the visibility timeout" if failed else ""
        ids = ", ".join(_row_id(m) for m in batch)
        say("processor", f"batch of {len(batch)} (rows {ids}): {len(done)} done{note}")


def _row_id(message: dict[str, Any]) -> str:
    try:
        return str(json.loads(message["Body"])["id"])
    except (ValueError, KeyError, TypeError):
        return "?"


# --- sweeper: the schedule -----------------------------------------------------------------


def sweeper_main(settings: WorkerSettings, stop: MpEvent, ready: MpQueue[Any]) -> None:
    _enter(settings)
    handler = load_handler(Path(settings.functions_dir), "sweeper")
    ready.put(("sweeper", 0))
    last_failure = ""
    while not stop.wait(settings.sweep_every_s) and not _orphaned(settings):
        try:
            result = handler(
                scheduled_event(settings.sweeper_rule_arn, settings.region),
                LocalContext("SweeperFunction", settings.sweeper_timeout_s),
            )
        except Exception as exc:  # noqa: BLE001 - the next scheduled run tries again, as in AWS
            failure = f"{type(exc).__name__}: {exc}"
            if failure != last_failure:  # say it once, not every period
                say("sweeper", f"run failed: {failure} (retrying every {settings.sweep_every_s}s)")
            last_failure = failure
            continue
        last_failure = ""
        if isinstance(result, dict):
            summary = _sweep_summary(result)
            if summary:
                say("sweeper", summary)
    sys.stdout.flush()


def _sweep_summary(report: dict[str, Any]) -> str:
    """The run's non-zero counters and any errors; an idle run says nothing."""
    counters = [
        f"{name}={value}"
        for name, value in sorted(report.items())
        if isinstance(value, int)
        and not isinstance(value, bool)
        and value
        and name != "duration_ms"
    ]
    errors = report.get("errors") or []
    if errors:
        counters.append(f"errors={json.dumps(errors, default=str)[:300]}")
    return " ".join(counters)
