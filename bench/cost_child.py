"""bench.cost's child: one function of one tree, in a fresh interpreter.

``python -m bench.cost --child SPEC`` (the command :func:`bench.cost_rig.run_child` builds) comes
here through :func:`bench.cost.main`: the process's streams are replaced by a capture before the
tree's code is imported, its handler is called with the function's share of the mix, and one JSON
document (INIT, and each invocation's wall, CPU, rig and log figures) goes to the real stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:webhook-inbox-processing"

_CHILD_MARK = "--child"


class _Capture:
    """A text stream that keeps what each invocation wrote (lines, bytes)."""

    def __init__(self) -> None:
        self.buffer: list[str] = []

    def write(self, text: str) -> int:
        self.buffer.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def take(self) -> str:
        text = "".join(self.buffer)
        self.buffer.clear()
        return text


class _RigClock:
    """How much of each invocation's wait was the rig's own, AWS call by AWS call.

    Every botocore call (``BaseClient._make_api_call``) is timed, wall and this thread's CPU;
    what it waited beyond ``round_trip_ms`` (the latency the proxy injects for one request and
    its response, which stands for the service's whole round trip) is the rig's: moto's service
    time, werkzeug closing each connection (so each call opens a new one), the proxy's own
    scheduling. The hook goes in when botocore.client is first imported, so the import itself
    stays where the function pays it (a deferred import in its first invocation).
    """

    def __init__(self, round_trip_ms: float) -> None:
        self.round_trip_ms = round_trip_ms
        self.excess_ms = 0.0

    def take(self) -> float:
        excess, self.excess_ms = self.excess_ms, 0.0
        return excess

    def install(self) -> None:
        import importlib.abc
        import importlib.machinery

        clock = self

        class Finder(importlib.abc.MetaPathFinder):
            def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
                if name != "botocore.client":
                    return None
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                if spec is None or spec.loader is None:
                    return spec
                loader = spec.loader
                execute = loader.exec_module

                def exec_module(module: Any) -> None:
                    execute(module)
                    clock.wrap(module.BaseClient)

                loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec

        sys.meta_path.insert(0, Finder())

    def wrap(self, client_class: Any) -> None:
        call = client_class._make_api_call
        clock = self

        def timed(client: Any, operation: str, params: Any) -> Any:
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            try:
                return call(client, operation, params)
            finally:
                wall = (time.perf_counter() - wall0) * 1000
                wait = wall - (time.thread_time() - cpu0) * 1000
                clock.excess_ms += max(0.0, wait - clock.round_trip_ms)

        client_class._make_api_call = timed


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child_main(argv: list[str]) -> None:
    """Runs in a fresh interpreter; prints one JSON document on the real stdout."""
    capture, real_stdout = _Capture(), sys.stdout
    sys.stdout = sys.stderr = capture  # type: ignore[assignment]
    spec = json.loads(argv[0])
    tree, function = Path(spec["tree"]), spec["function"]
    sys.path[:0] = [
        str(tree / "functions" / function),
        str(tree / "layers" / "shared"),
        str(tree / "application"),
        str(ROOT),
    ]
    os.environ.update(spec["env"])
    rig = _RigClock(spec.get("send_ms", 0.0))
    rig.install()

    import importlib.util
    import uuid

    cpu0, wall0 = time.thread_time(), time.perf_counter()
    module_spec = importlib.util.spec_from_file_location(
        f"app_{function}", tree / "functions" / function / "app.py"
    )
    assert module_spec is not None
    assert module_spec.loader is not None
    app = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(app)
    init = {
        "cpu_ms": (time.thread_time() - cpu0) * 1000,
        "wall_ms": (time.perf_counter() - wall0) * 1000,
        "bytes": len(capture.take().encode()),
    }

    import webhook_inbox

    assert str(tree) in webhook_inbox.__file__, webhook_inbox.__file__

    class Context:
        function_name = f"webhook-inbox-{function}"
        function_version = "$LATEST"
        memory_limit_in_mb = 512
        invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function}"
        log_group_name = f"/aws/lambda/webhook-inbox/{function}"
        log_stream_name = "bench"

        def __init__(self) -> None:
            self.aws_request_id = str(uuid.uuid4())

        def get_remaining_time_in_millis(self) -> int:
            return 30_000

    events = _child_events(spec, function)
    invocations = []
    rig.take()  # whatever the events' setup called
    for event, expect in events:
        context = Context()
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        reply = app.handler(event, context)
        wall = (time.perf_counter() - wall0) * 1000
        cpu = (time.thread_time() - cpu0) * 1000
        rig_ms = rig.take()
        text = capture.take()
        if expect is not None and reply.get("statusCode") != expect:
            raise SystemExit(f"{function} answered {reply}, expected {expect}: {text[-500:]}")
        if function == "processor" and reply.get("batchItemFailures"):
            raise SystemExit(f"processor failed records: {reply}")
        invocations.append(
            {
                "wall_ms": wall - rig_ms,
                "rig_ms": rig_ms,
                "cpu_ms": cpu,
                "bytes": len(text.encode()),
                "lines": text.splitlines()[:3],
                "line_count": text.count("\n"),
                "published": _outbox_published(text),
            }
        )
    found: dict[str, Any] = {"init": init, "invocations": invocations}
    found["peak_rss_mb"] = _peak_rss_mb()
    real_stdout.write(json.dumps(found))


def _outbox_published(text: str) -> int:
    """How many outbox messages a sweep published (its summary line says), else 0."""
    for line in text.splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            sweep = json.loads(line).get("sweep")
            if isinstance(sweep, dict):
                return int(sweep.get("outbox_published", 0))
    return 0


def _stripe_id() -> str:
    import secrets
    import string

    alphabet = string.ascii_letters + string.digits
    return "evt_" + "".join(secrets.choice(alphabet) for _ in range(24))  # Stripe's shape


def _child_events(spec: dict[str, Any], function: str) -> list[tuple[dict[str, Any], int | None]]:
    """The function's share of the mix: (event, expected HTTP status or None)."""
    import uuid

    import psycopg

    if function == "ingest":
        import hashlib
        import hmac

        from bench.stripe_events import stripe_body
        from tests.ingest_support import v2_event

        # Signed here as Stripe signs (t=…,v1=HMAC-SHA256 of "t.body"), with the tree's own
        # development secret: the trees' signing helpers differ in name and place.
        config = json.loads(Path(spec["env"]["PROVIDERS_CONFIG_FILE"]).read_text())
        secret = config.get("providers", config)["stripe"]["secrets"][0]["value"].encode()
        now = int(time.time())
        made = []
        for _ in range(spec["deliveries"]):
            event_id = _stripe_id()
            body = stripe_body(event_id, now)
            mac = hmac.new(secret, f"{now}.".encode() + body, hashlib.sha256).hexdigest()
            made.append(v2_event("stripe", body, {"Stripe-Signature": f"t={now},v1={mac}"}))
        # Each duplicate right behind its original, as a sender's retry meets a stored event
        # whose wake-up is recent or already processed: no second SendMessage (the bill counts
        # one per webhook). Sent after every original, ten seconds on, the claim would find
        # each row still waiting with its wake-up older than REWAKE_AFTER_S and send it again,
        # which a running processor (within a second of the wake-up) leaves no time for.
        duplicated = int(len(made) * spec["duplicate_share"])
        mix: list[tuple[dict[str, Any], int | None]] = []
        for n, event in enumerate(made):
            mix.append((event, 202))
            if n < duplicated:
                mix.append((event, 200))
        return mix
    if function == "processor":
        with psycopg.connect(spec["env"]["DATABASE_URL"]) as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM webhook_events WHERE status = 'received' ORDER BY id"
                )
            ]
        size = spec["batch_size"]
        return [
            (
                {
                    "Records": [
                        {
                            "messageId": str(uuid.uuid4()),
                            "receiptHandle": "bench",
                            "body": json.dumps({"id": i}),
                            "attributes": {"ApproximateReceiveCount": "1"},
                            "messageAttributes": {},
                            "md5OfBody": "",
                            "eventSource": "aws:sqs",
                            "awsRegion": "us-east-1",
                            "eventSourceARN": QUEUE_ARN,
                        }
                        for i in ids[n : n + size]
                    ]
                },
                None,
            )
            for n in range(0, len(ids), size)
        ]
    schedule = json.loads((ROOT / "events" / "schedule.json").read_text())
    return [(schedule, None) for _ in range(spec["sweeps"])]
