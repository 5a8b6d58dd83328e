"""Worker processes of the chaos soak: ``python -m tests.reliability.soak_workers <role>``.

Each role runs the real function module (functions/<name>/app.py, loaded as SAM would) in a
process of its own, so the soak can SIGKILL it like Lambda's runtime would lose an execution
environment:

* ``ingest``    — an HTTP server on 127.0.0.1 (one request at a time, like one Lambda
                  environment) that turns each POST into an HTTP API v2 event;
* ``processor`` — the SQS event source mapping: receive up to 10 messages, invoke the handler,
                  delete what it did not report as a batch item failure;
* ``sweeper``   — the schedule: invoke the handler every ``SOAK_SWEEP_INTERVAL_S``.

Faults are injected at the boto3 boundary: while the control directory holds ``faults.on``,
SendMessage / SendMessageBatch / PutEvents / PublishBatch calls fail with the given probability
before they leave the process. Every injected fault is appended to ``faults-<pid>.log`` at once
(a SIGKILLed worker keeps its count), and every entry EventBridge accepted to
``published-<pid>.jsonl`` as the answer arrives. With the fault layer the network faults come
from the soak's proxies instead; the workers only report what they saw, also in
``faults-<pid>.log``: a kept connection found dead and its statement repeated
(``stale_connection_retried``), an ingest answer later than the function's timeout
(``lambda_timeout``, answered 500 as API Gateway would), and, with a timestamp in
``events-<pid>.log``, every processor batch handed back whole for a database failure
(``batch_handed_back``).

Wake-ups lost after the stamp (issue 24): while ``lost_send.on`` exists, a send that
SQS accepted fails on the caller's side with the given probability (the answer was lost: the
message is queued, the caller believes it is not); a file ``send_kill`` is taken by the first
ingest worker about to send a wake-up, which then SIGKILLs itself between the claim's stamp and
the send. Both append ``<kind> <time> <row ids>`` to ``wakeups-<pid>.log`` before acting.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import traceback
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from tests.support import FakeLambdaContext, load_function

# The sweeper's clock in the soak: every ~1 s instead of every minute, and its stale threshold
# divided alike (RELIABILITY.md, "The soak's clock").
SWEEPER_COMPRESSION = 60


class Control:
    """The files the soak uses to steer its workers."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self._log = self.directory / f"faults-{os.getpid()}.log"

    def faults_on(self) -> bool:
        return (self.directory / "faults.on").exists()

    def stopping(self) -> bool:
        return (self.directory / "stop").exists()

    def record(self, kind: str) -> None:
        with self._log.open("a") as log:
            log.write(kind + "\n")

    def record_wakeups(self, kind: str, row_ids: list[int]) -> None:
        """Wake-ups lost (or made ambiguous) by an injected fault, with the moment it struck."""
        ids = ",".join(map(str, row_ids))
        with (self.directory / f"wakeups-{os.getpid()}.log").open("a") as log:
            log.write(f"{kind} {time.time():.3f} {ids}\n")

    def record_at(self, kind: str) -> None:
        """An event with its wall-clock time (the soak matches it against its fault windows)."""
        with (self.directory / f"events-{os.getpid()}.log").open("a") as log:
            log.write(f"{kind} {time.time():.3f}\n")


def watch_repeatable_statements(control: Control) -> None:
    """Record each statement repeated on a fresh connection because the kept one had died."""
    from webhook_inbox.store import db

    original = db.run_repeatable

    def recording(work: Any, **kwargs: Any) -> Any:
        result, retried = original(work, **kwargs)
        if retried:
            control.record("stale_connection_retried")
        return result, retried

    db.run_repeatable = recording  # type: ignore[assignment]


@dataclass
class DeadlineContext(FakeLambdaContext):
    """A LambdaContext whose remaining time runs down from the invocation's start."""

    timeout_s: float = 6.0
    started: float = 0.0

    def __post_init__(self) -> None:
        self.started = time.monotonic()

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.started + self.timeout_s - time.monotonic()) * 1000))


def install_boto_faults(control: Control, role: str) -> None:
    """Fail outgoing sends and publishes at random while faults are on (every client made from
    the default session afterwards inherits these hooks); lose wake-ups after the stamp when
    the soak asks for it."""
    import boto3
    from botocore.exceptions import ClientError

    send_rate = float(os.environ.get("SOAK_SQS_FAULT_RATE", "0"))
    publish_rate = float(os.environ.get("SOAK_PUBLISH_FAULT_RATE", "0"))
    lost_send_rate = float(os.environ.get("SOAK_LOST_SEND_RATE", "0"))

    def hook(kind: str, operation: str, rate: float) -> Any:
        def fail_sometimes(**_: Any) -> None:
            if rate > 0 and control.faults_on() and random.random() < rate:
                control.record(kind)
                raise ClientError(
                    {"Error": {"Code": "ServiceUnavailable", "Message": "injected by the soak"}},
                    operation,
                )

        return fail_sometimes

    boto3.setup_default_session()
    events = boto3.DEFAULT_SESSION.events  # type: ignore[attr-defined]
    # What EventBridge accepted, recorded as it answers (the soak's proof of publication).
    published_log = control.directory / f"published-{os.getpid()}.jsonl"

    def remember_entries(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["soak_entries"] = params.get("Entries", [])

    def record_accepted(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        accepted = [
            entry["Detail"]
            for entry, answer in zip(
                context.get("soak_entries", []), parsed.get("Entries", []), strict=False
            )
            if answer.get("EventId") and not answer.get("ErrorCode")
        ]
        if accepted:
            with published_log.open("a") as log:
                log.write("".join(detail + "\n" for detail in accepted))

    events.register("provide-client-params.events.PutEvents", remember_entries)
    events.register("after-call.events.PutEvents", record_accepted)
    events.register("before-call.sqs.SendMessage", hook("sqs_send", "SendMessage", send_rate))
    events.register(
        "before-call.sqs.SendMessageBatch", hook("sqs_send", "SendMessageBatch", send_rate)
    )
    events.register("before-call.events.PutEvents", hook("publish", "PutEvents", publish_rate))
    events.register("before-call.sns.PublishBatch", hook("publish", "PublishBatch", publish_rate))

    def remember_rows(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        bodies = [e["MessageBody"] for e in params.get("Entries", [])] or [params["MessageBody"]]
        documents = [json.loads(body) for body in bodies]  # {"id": N}, or {"ids": [...]}
        context["soak_rows"] = [i for doc in documents for i in doc.get("ids") or [doc["id"]]]

    def lose_the_answer(http_response: Any, context: dict[str, Any], **_: Any) -> None:
        """SQS queued the messages; the caller is told it failed (a timeout on the answer)."""
        if http_response.status_code >= 300 or not (control.directory / "lost_send.on").exists():
            return
        if random.random() >= lost_send_rate:
            return
        control.record("lost_send_answer")
        control.record_wakeups("lost_send", context.get("soak_rows", []))
        raise ClientError(
            {"Error": {"Code": "RequestTimeout", "Message": "answer lost by the soak"}}, "Send"
        )

    def die_before_sending(context: dict[str, Any], **_: Any) -> None:
        """The claim committed with its stamp; the process dies before the message leaves."""
        try:
            (control.directory / "send_kill").unlink()  # one worker takes each trigger
        except FileNotFoundError:
            return
        control.record("killed_before_send")
        control.record_wakeups("send_kill", context.get("soak_rows", []))
        os.kill(os.getpid(), signal.SIGKILL)

    for operation in ("SendMessage", "SendMessageBatch"):  # ingest sends one row alone
        events.register(f"provide-client-params.sqs.{operation}", remember_rows)
        events.register(f"after-call.sqs.{operation}", lose_the_answer)
        if role == "ingest":
            events.register(f"before-call.sqs.{operation}", die_before_sending)


# --- roles ---------------------------------------------------------------------------------


def run_ingest(control: Control) -> None:
    from tests.ingest_support import v2_event

    app = load_function("ingest")
    port = int(os.environ["SOAK_PORT"])
    # The function's timeout (template: 8 s): a later answer is what API Gateway never sees.
    timeout_s = float(os.environ.get("SOAK_INGEST_TIMEOUT_S", "8"))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            provider = self.path.rstrip("/").rsplit("/", 1)[-1]
            event = v2_event(provider, body, dict(self.headers.items()))
            started = time.monotonic()
            reply = app.handler(event, FakeLambdaContext())
            if time.monotonic() - started > timeout_s:
                control.record("lambda_timeout")
                reply = {
                    "statusCode": 500,
                    "headers": {},
                    "body": '{"message":"Internal Server Error"}',
                }
            payload = reply["body"].encode()
            self.send_response(reply["statusCode"])
            for name, value in reply.get("headers", {}).items():
                if name.lower() not in {"content-length"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return  # the function's own log lines are what we keep

    server = HTTPServer(("127.0.0.1", port), Handler)
    server.timeout = 0.5
    while not control.stopping():
        server.handle_request()
    server.server_close()


def _sqs_records(messages: list[dict[str, Any]], queue_arn: str) -> list[dict[str, Any]]:
    return [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {},
            "md5OfBody": m.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": "us-east-1",
        }
        for m in messages
    ]


def run_processor(control: Control) -> None:
    """The SQS event source mapping around the processor function."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from webhook_inbox.processing import batch as processing

    # Compressed time: leases outlive an invocation by a margin of seconds, not half a minute,
    # so a SIGKILLed worker's rows come free within the soak.
    processing.LEASE_MARGIN_SECONDS = float(os.environ.get("SOAK_LEASE_MARGIN_S", "2"))
    processing.MIN_LEASE_SECONDS = float(os.environ.get("SOAK_MIN_LEASE_S", "3"))
    app = load_function("processor")
    batch = processing._process_chunk

    def recording_abandoned_batches(*args: Any, **kwargs: Any) -> Any:
        from webhook_inbox.errors import StoreError

        try:
            return batch(*args, **kwargs)
        except StoreError:
            control.record_at("batch_handed_back")  # this chunk and the later ones go back
            raise

    processing._process_chunk = recording_abandoned_batches  # type: ignore[assignment]
    queue_url = os.environ["PROCESSING_QUEUE_URL"]
    timeout_s = float(os.environ.get("SOAK_FUNCTION_TIMEOUT_S", "5"))
    name = os.environ.get("SOAK_WORKER_NAME", f"processor-{os.getpid()}")
    sqs = boto3.client("sqs")
    # The queue's ARN from its URL (…/<account>/<name>): no call that a hanging SQS could stall.
    account, queue_name = queue_url.rstrip("/").rsplit("/", 2)[-2:]
    queue_arn = f"arn:aws:sqs:us-east-1:{account}:{queue_name}"
    while not control.stopping():
        # The event source mapping's own SQS calls: when SQS fails them (the fault layer hangs
        # or cuts its connections), it tries again; undeleted messages come back visible.
        try:
            messages = sqs.receive_message(
                QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1
            ).get("Messages", [])
        except (BotoCoreError, ClientError):
            control.record("esm_sqs_error")
            time.sleep(0.2)
            continue
        if not messages:
            continue
        context = DeadlineContext(function_name=name, timeout_s=timeout_s)
        context.aws_request_id = str(uuid.uuid4())
        try:
            result = app.handler({"Records": _sqs_records(messages, queue_arn)}, context)
        except Exception:  # noqa: BLE001 - an invocation error: Lambda retries the whole batch
            control.record("invocation_error")
            traceback.print_exc(file=sys.stderr)
            continue
        failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        if not done:
            continue
        try:
            sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)
                ],
            )
        except (BotoCoreError, ClientError):
            control.record("esm_sqs_error")


def record_sweeper_sends(control: Control) -> None:
    """Record every row the sweeper claims for a (re-)send, with the time: how soon a lost
    wake-up was sent again (``sends-<pid>.log``: ``<time> <row id>,<row id>…``)."""
    from webhook_inbox.store import inbox_upkeep

    claim = inbox_upkeep.claim_due_for_enqueue

    def recording(*args: Any, **kwargs: Any) -> Any:
        rows = claim(*args, **kwargs)
        if rows:
            ids = ",".join(str(row[0]) for row in rows)
            with (control.directory / f"sends-{os.getpid()}.log").open("a") as log:
                log.write(f"{time.time():.3f} {ids}\n")
        return rows

    inbox_upkeep.claim_due_for_enqueue = recording  # type: ignore[assignment]


def run_sweeper(control: Control) -> None:
    import dataclasses

    from webhook_inbox import config as settings_config
    from webhook_inbox.settings import SweeperSettings

    record_sweeper_sends(control)
    app = load_function("sweeper")
    interval = float(os.environ.get("SOAK_SWEEP_INTERVAL_S", "1"))
    timeout_s = float(os.environ.get("SOAK_SWEEPER_TIMEOUT_S", "6"))
    # The same time compression as the processors': a minute-scale schedule, half-minute lease
    # margins and the minutes-long "message lost" threshold become seconds.
    config = settings_config.current(SweeperSettings)
    compressed = dataclasses.replace(
        config,
        reenqueue_stale_seconds=config.reenqueue_stale_seconds / SWEEPER_COMPRESSION,
        safety_margin_ms=1500,
        measure_reserve_ms=500,
        outbox_lease_margin_s=2.0,
    )
    settings_config.use(compressed)
    name = os.environ.get("SOAK_WORKER_NAME", f"sweeper-{os.getpid()}")
    while not control.stopping():
        context = DeadlineContext(function_name=name, timeout_s=timeout_s)
        context.aws_request_id = str(uuid.uuid4())
        try:
            app.handler({"source": "aws.events", "detail-type": "Scheduled Event"}, context)
        except Exception:  # noqa: BLE001 - a failed scheduled run; the next one starts over
            control.record("sweep_error")
            traceback.print_exc(file=sys.stderr)
        time.sleep(interval * random.uniform(0.5, 1.5))


ROLES = {"ingest": run_ingest, "processor": run_processor, "sweeper": run_sweeper}


def main() -> None:
    role = sys.argv[1]
    control = Control(os.environ["SOAK_CONTROL_DIR"])
    install_boto_faults(control, role)
    watch_repeatable_statements(control)
    ROLES[role](control)
    json.dump({"role": role, "pid": os.getpid(), "exit": "clean"}, sys.stderr)


if __name__ == "__main__":
    main()
