"""The functions, each execution environment in its own process as Lambda isolates them.

Each process loads the real ``functions/<name>/app.py`` with the environment the template would
give it and ignores SIGINT: Ctrl-C reaches the whole process group, and the parent decides when
to stop, so it never cuts a transaction in half. SIGTERM or SIGHUP (from the parent, or sent to
the group by a supervisor) asks a worker to finish its current invocation and exit; a worker
whose parent has gone exits on its own. No lock is shared with the parent, so a worker that
dies can never leave the parent waiting.

Ingest runs as several environments, each answering one request at a time through a pipe from
the parent's gateway (see :mod:`webhook_inbox_tools.dev.gateway`), as API Gateway invokes Lambda.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue as MpQueue
from pathlib import Path
from types import FrameType
from typing import Any

from webhook_inbox_tools.dev import changes
from webhook_inbox_tools.dev.explain import outcome_summary
from webhook_inbox_tools.dev.lambda_runtime import (
    LocalContext,
    failed_message_ids,
    load_handler,
    load_module,
    scheduled_event,
    sqs_event,
)

INGEST_TIMEOUT_S = 30.0
OPERATOR_TIMEOUT_S = 60.0  # the operator functions' timeout (template.yaml)


@dataclass(frozen=True)
class WorkerSettings:
    env: dict[str, str]
    functions_dir: str
    parent_pid: int
    region: str
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


_stop_requested = False


def load_error(exc: BaseException) -> str:
    """Why a function's code did not load, named by file and line (the deepest frame, or a
    SyntaxError's own position) instead of a traceback."""
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}, line {exc.lineno}: SyntaxError: {exc.msg}"
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}, line {frames[-1].lineno}: " if frames else ""
    return f"{where}{type(exc).__name__}: {exc}"


def _request_stop(_signum: int, _frame: FrameType | None) -> None:
    global _stop_requested  # noqa: PLW0603 - a signal handler can only reach module state
    _stop_requested = True


def _enter(settings: WorkerSettings) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGHUP, _request_stop)
    os.environ.update(settings.env)
    if settings.env.get("POWERTOOLS_METRICS_DISABLED") == "true":
        sys.stdout = _WithoutMetricBlobs(sys.stdout)


def _running(settings: WorkerSettings) -> bool:
    return not _stop_requested and os.getppid() == settings.parent_pid


def _pause(settings: WorkerSettings, seconds: float) -> None:
    """Sleep, waking early when asked to stop (in short steps: no lock shared with the parent)."""
    deadline = time.monotonic() + seconds
    while _running(settings) and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


# --- ingest: one execution environment behind the gateway ----------------------------------


def ingest_main(
    settings: WorkerSettings, index: int, channel: Connection, ready: MpQueue[Any]
) -> None:
    """Answer API Gateway events from ``channel`` one at a time until told to stop."""
    _enter(settings)
    try:
        handler, outcomes = _observed_ingest(Path(settings.functions_dir))
    except Exception as exc:  # noqa: BLE001 - anything the code's import raises, reported
        ready.put((f"ingest-{index}", load_error(exc)))
        return
    ready.put((f"ingest-{index}", 0))
    for event in _requests(settings, channel):
        outcomes.clear()
        try:
            response = handler(event, LocalContext("IngestFunction", INGEST_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - as Lambda does: a crashed invocation is an error reply
            traceback.print_exc()
            response = None
        summary = outcome_summary(outcomes[-1]) if outcomes else None
        try:
            channel.send((response, summary))
        except (BrokenPipeError, OSError):
            return


def operator_main(
    settings: WorkerSettings, level: str, channel: Connection, ready: MpQueue[Any]
) -> None:
    """The operator function at ``level`` (``OPERATOR_LEVEL``): Function URL events from the
    gateway's ``/operator/<level>``, one at a time, as one execution environment."""
    _enter(settings)
    os.environ["OPERATOR_LEVEL"] = level
    name = f"operator-{level}"
    try:
        handler = load_handler(Path(settings.functions_dir), "operator")
    except Exception as exc:  # noqa: BLE001 - anything the code's import raises, reported
        ready.put((name, load_error(exc)))
        return
    ready.put((name, 0))
    function = f"Operator{level.capitalize()}Function"
    for event in _requests(settings, channel):
        try:
            response = handler(event, LocalContext(function, OPERATOR_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - as Lambda does: a crashed invocation is a 502
            traceback.print_exc()
            response = None
        try:
            channel.send((response, None))
        except (BrokenPipeError, OSError):
            return


def _requests(settings: WorkerSettings, channel: Connection) -> Iterator[Any]:
    """The gateway's requests, one at a time, until told to stop or the gateway is gone."""
    while _running(settings):
        try:
            if not channel.poll(0.2):
                continue
            event = channel.recv()
        except (EOFError, OSError):
            return  # the gateway (the parent) is gone
        yield event


def _observed_ingest(functions_dir: Path) -> tuple[Any, list[Any]]:
    """The ingest handler, and the list where each invocation's outcome lands: the function's
    own ``observe`` (which writes its log line) is wrapped to keep the outcome too, so that the
    console can say why a delivery was refused without the JSON log lines."""
    module = load_module(functions_dir, "ingest")
    outcomes: list[Any] = []
    observe = getattr(module, "observe", None)
    if callable(observe):

        def observe_and_keep(outcome: Any, context: Any) -> None:
            outcomes.append(outcome)
            observe(outcome, context)

        setattr(module, "observe", observe_and_keep)  # noqa: B010 - a loaded module
    return module.handler, outcomes


# --- processor: the SQS event source mapping -----------------------------------------------


def processor_main(settings: WorkerSettings, ready: MpQueue[Any]) -> None:
    """Poll like the event source mapping: batches, partial failures, visibility, redrive."""
    _enter(settings)
    import boto3

    try:
        handler = load_handler(Path(settings.functions_dir), "processor")
    except Exception as exc:  # noqa: BLE001 - anything the code's import raises, reported
        ready.put(("processor", load_error(exc)))
        return
    changes.name_each_handlers_event()  # for the console's "no change" (dev only)
    sqs = boto3.client("sqs", region_name=settings.region)
    ready.put(("processor", 0))
    while _running(settings):
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
    """``{"id": N}``, or a sweeper's re-wake ``{"ids": [N, …]}`` shown as ``N+M+…``."""
    try:
        body = json.loads(message["Body"])
        return "+".join(str(row_id) for row_id in body["ids"]) if "ids" in body else str(body["id"])
    except (ValueError, KeyError, TypeError):
        return "?"


# --- sweeper: the schedule -----------------------------------------------------------------


def sweeper_main(settings: WorkerSettings, ready: MpQueue[Any]) -> None:
    _enter(settings)
    try:
        handler = load_handler(Path(settings.functions_dir), "sweeper")
    except Exception as exc:  # noqa: BLE001 - anything the code's import raises, reported
        ready.put(("sweeper", load_error(exc)))
        return
    ready.put(("sweeper", 0))
    last_failure = ""
    while True:
        _pause(settings, settings.sweep_every_s)
        if not _running(settings):
            break
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
