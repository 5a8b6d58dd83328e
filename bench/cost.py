"""What a million webhooks cost on AWS, all in: the real handlers, measured, priced at list prices.

    python -m bench.cost [--baseline TREE] [--deliveries 600] [--rounds 3] [--db-rtt-ms 1]
                         [--send-ms 10] [--batch-size 10] [--cold-start-rate 0.01] ...

Each variant is a source tree: this checkout, and with ``--baseline`` another one (make it with
``git worktree add --detach /tmp/wi-main main``), so the code of today and the code of this
branch run in the same run, on the same database server, behind the same injected latency,
rounds alternating.
Each (tree, function) runs in a fresh interpreter whose ``sys.path`` is that tree's layer and
application (and its ``functions/<name>/app.py``), as Lambda would load it:

- ingest: ``--deliveries`` signed Stripe deliveries (HTTP API v2 events), ``--duplicate-share``
  of them sent a second time, each right behind its original; the real SendMessage goes over
  HTTP to a moto server;
- processor: the stored rows in SQS-shaped batches of ``--batch-size`` (what the event source
  mapping hands over), the example application's handlers, commits and all;
- sweeper: ``--sweeps`` scheduled runs after that (the steady state: little left to do).

Latency: PostgreSQL and moto are each reached through ``tests/faults/proxy.py`` (loopback TCP)
that delays every chunk by half the round trip in each direction: ``--db-rtt-ms`` for the
database, ``--send-ms`` for AWS calls (a botocore call pays it once per request/response).
The queue is drained while a function runs (:func:`draining`): moto's SendMessage slows down
with the queue's depth, SQS's does not. Each AWS call is counted at the injected round trip: the
rest of its wait is the rig's, not AWS's (moto's own service time, the new connection werkzeug's
server makes each request open, the proxy's scheduling), and is taken off the invocation's wall
time (:class:`_RigClock`; its median per invocation is in the report). The injected latency
stands for the whole round trip to SQS, its service time included, as seen from a warm function
whose connection is kept alive.

Logs: every byte the function writes to stdout and stderr is captured (the process's streams are
replaced before anything is imported, so Powertools' Logger and its EMF output write into the
capture), per invocation. The Lambda runtime's own lines are added as the tree's template
configures them (``LoggingConfig``), at the sizes rendered by :func:`platform_bytes`. HTTP API
access log lines are rendered from the template's ``AccessLogSettings.Format``.

Compute: each invocation's wall time splits into CPU time (``time.thread_time``) and waiting.
Lambda gives a function CPU in proportion to its memory (one vCPU at 1,769 MB), so the billed
duration at ``M`` MB is ``wait + cpu * max(1, 1769 / M)``, rounded up to 1 ms. Cold starts: the
import's CPU time (billed INIT, scaled the same way) times ``--cold-start-rate``.

Prices are us-east-1 list prices, each an argument (defaults printed with the results). The
floor is what no code can avoid: the endpoint's per-request charge, Lambda requests, SQS
requests. Results go to docs/benchmarks.md (section ``cost``) and stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import memory_sizing
from bench.memory_sizing import LAMBDA_FULL_VCPU_MB, SIZES_MB, WITHIN_NEXT, billed_ms

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ("ingest", "processor", "sweeper")
SCHEDULED_RUNS_PER_MONTH = 60 * 24 * 30  # rate(1 minute)
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:webhook-inbox-processing"


# --- prices and assumptions -------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """us-east-1 list prices (the pricing pages of each service; first tier, no free tier)."""

    logs_per_gb: float = 0.50  # CloudWatch Logs, standard class, ingestion per GB
    logs_ia_per_gb: float = 0.25  # CloudWatch Logs, Infrequent Access class, ingestion per GB
    gb_bytes: float = 1e9  # the pricing pages' GB
    http_api_per_million: float = 1.00  # HTTP API, first 300 million requests a month
    function_url_per_million: float = 0.0  # Function URLs: no charge beyond the invocation
    lambda_requests_per_million: float = 0.20
    lambda_gb_second_arm: float = 0.0000133334  # arm64, first 7.5 billion GB-s a month
    sqs_per_million: float = 0.40  # standard queue, per request (per 64 KB chunk)
    eventbridge_per_million: float = 1.00  # PutEvents, custom events (per 64 KB chunk)


@dataclass(frozen=True)
class Workload:
    batch_size: int = 10
    cold_start_rate: float = 0.01  # share of invocations that start a new environment
    webhooks_per_month: float = 10_000_000  # spreads the sweeper's fixed monthly cost
    outbox_messages_per_webhook: float = 1.0
    event_overhead_bytes: int = 0  # per log event, beyond its text (see docs/benchmarks.md)


# --- the Lambda runtime's own lines ---------------------------------------------------------

_REQUEST_ID = "8f507cfc-5c5a-4a2d-9d2b-6c1a3f0e9b21"  # every request id is 36 characters
_TIME = "2026-11-30T10:00:00.123Z"


def platform_lines(
    logging_config: dict[str, Any],
    *,
    duration_ms: float,
    memory_mb: int,
    used_mb: int,
    init_ms: float | None,
) -> list[str]:
    """The runtime's lines for one invocation, as CloudWatch receives them.

    Text format (Lambda's default): START, END and REPORT, in the shapes Lambda's developer guide
    shows ("Using the Lambda console"/"Python logging" examples). JSON format: ``platform.start``
    and ``platform.report`` records (the Telemetry API schema the JSON format uses), sent at
    SystemLogLevel INFO or DEBUG and not at WARN: "By default, Lambda sets the system log level
    to INFO. With this setting, Lambda automatically sends "start" and "report" log messages"
    (Lambda developer guide, "Log-level filtering").
    """
    billed = math.ceil(duration_ms)
    if str(logging_config.get("LogFormat", "Text")).upper() != "JSON":
        report = (
            f"REPORT RequestId: {_REQUEST_ID}\tDuration: {duration_ms:.2f} ms\tBilled Duration:"
            f" {billed} ms\tMemory Size: {memory_mb} MB\tMax Memory Used: {used_mb} MB\t"
        )
        if init_ms is not None:
            report += f"Init Duration: {init_ms:.2f} ms\t"
        return [
            f"START RequestId: {_REQUEST_ID} Version: $LATEST",
            f"END RequestId: {_REQUEST_ID}",
            report,
        ]
    if str(logging_config.get("SystemLogLevel", "INFO")).upper() == "WARN":
        return []
    metrics: dict[str, Any] = {
        "durationMs": round(duration_ms, 3),
        "billedDurationMs": billed,
        "memorySizeMB": memory_mb,
        "maxMemoryUsedMB": used_mb,
    }
    if init_ms is not None:
        metrics["initDurationMs"] = round(init_ms, 3)
    start = {
        "time": _TIME,
        "type": "platform.start",
        "record": {"requestId": _REQUEST_ID, "version": "$LATEST"},
    }
    report_record = {
        "time": _TIME,
        "type": "platform.report",
        "record": {"requestId": _REQUEST_ID, "metrics": metrics, "status": "success"},
    }
    return [
        json.dumps(start, separators=(",", ":")),
        json.dumps(report_record, separators=(",", ":")),
    ]


def access_log_line(format_text: str, samples: dict[str, str]) -> str:
    """An HTTP API access log line: ``$context.x`` variables replaced by sample values."""
    text = " ".join(format_text.split()).replace("\n", "")
    return re.sub(r"\$context\.[A-Za-z.]+", lambda m: samples.get(m.group(0), "-"), text)


# --- reading a tree's template ------------------------------------------------------------------


def template_of(tree: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import yaml

    from tests.infra_support import _CfnLoader

    loaded: dict[str, Any] = yaml.load((tree / "template.yaml").read_text(), Loader=_CfnLoader)  # noqa: S506
    return loaded


def _value(node: Any, parameters: dict[str, Any]) -> Any:
    """A template value with ``!Ref Parameter`` (and ``!FindInMap`` on a parameter) resolved to
    the parameter's default."""
    if isinstance(node, dict) and "Ref" in node and node["Ref"] in parameters:
        return parameters[node["Ref"]].get("Default")
    return node


@dataclass
class Deployment:
    """What a tree's template deploys with its defaults, as far as the bill is concerned."""

    memory_mb: dict[str, int]
    logging: dict[str, dict[str, Any]]
    access_log_format: str | None
    # Each log group's class (STANDARD or INFREQUENT_ACCESS), by function and "access".
    log_class: dict[str, str] = field(default_factory=dict)

    def logs_price(self, group: str, prices: Prices) -> float:
        """USD per GB ingested into ``group``'s log group, by its class."""
        ia = self.log_class.get(group) == "INFREQUENT_ACCESS"
        return prices.logs_ia_per_gb if ia else prices.logs_per_gb

    @classmethod
    def of(cls, tree: Path) -> Deployment:
        template = template_of(tree)
        parameters = template.get("Parameters", {})
        globals_ = template.get("Globals", {}).get("Function", {})
        names = {
            "ingest": "IngestFunction",
            "processor": "ProcessorFunction",
            "sweeper": "SweeperFunction",
        }
        resources = template["Resources"]

        def group_class(group: Any) -> str:
            if isinstance(group, dict) and group.get("Ref") in resources:
                props = resources[group["Ref"]].get("Properties", {})
                return str(props.get("LogGroupClass", "STANDARD"))
            return "STANDARD"

        memory, logging_, classes = {}, {}, {}
        for function, resource in names.items():
            props = resources[resource]["Properties"]
            memory[function] = int(
                _value(props.get("MemorySize", globals_.get("MemorySize", 128)), parameters)
            )
            config = {**globals_.get("LoggingConfig", {}), **props.get("LoggingConfig", {})}
            logging_[function] = {k: _value(v, parameters) for k, v in config.items()}
            classes[function] = group_class(config.get("LogGroup"))
        api = resources.get("HttpApi", {}).get("Properties", {})
        settings = api.get("AccessLogSettings", {})
        access = settings.get("Format")
        destination = settings.get("DestinationArn")
        if isinstance(destination, dict) and "Fn::GetAtt" in destination:
            classes["access"] = group_class({"Ref": destination["Fn::GetAtt"][0]})
        return cls(memory, logging_, access, classes)


# --- the child: one function of one tree, in a fresh interpreter ------------------------------

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


# --- the parent ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Measured:
    """One function of one tree, over the rounds."""

    init_cpu_ms: list[float] = field(default_factory=list)
    init_wall_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    line_counts: list[int] = field(default_factory=list)
    peak_rss_mb: list[float] = field(default_factory=list)
    rig_ms: list[float] = field(default_factory=list)  # the rig's wait taken off, per invocation
    sample_lines: list[str] = field(default_factory=list)
    # Each round's first invocation (the fresh interpreter's: a cold start's first call).
    first_wall_ms: list[float] = field(default_factory=list)
    first_cpu_ms: list[float] = field(default_factory=list)
    published: list[int] = field(default_factory=list)  # the sweeper's outbox messages per run

    def add(self, found: dict[str, Any]) -> None:
        self.init_cpu_ms.append(found["init"]["cpu_ms"])
        self.init_wall_ms.append(found["init"]["wall_ms"])
        self.peak_rss_mb.append(found["peak_rss_mb"])
        if found["invocations"]:
            self.first_wall_ms.append(found["invocations"][0]["wall_ms"])
            self.first_cpu_ms.append(found["invocations"][0]["cpu_ms"])
        for inv in found["invocations"]:
            self.wall_ms.append(inv["wall_ms"])
            self.rig_ms.append(inv["rig_ms"])
            self.cpu_ms.append(inv["cpu_ms"])
            self.bytes.append(inv["bytes"])
            self.line_counts.append(inv["line_count"])
            self.published.append(inv.get("published", 0))
        if not self.sample_lines and found["invocations"]:
            self.sample_lines = found["invocations"][0]["lines"]


@contextlib.contextmanager
def infrastructure(db_rtt_ms: float, send_ms: float) -> Iterator[dict[str, Any]]:
    """A PostgreSQL server and a moto SQS, each behind a latency-injecting proxy."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    sys.path.insert(0, str(ROOT))
    from tests.faults.proxy import FaultProxy, pg_upstream, via_proxy
    from tests.support import PostgresServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = PostgresServer()
    moto_port = _free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    moto.start()
    try:
        with (
            FaultProxy(pg_upstream(server.admin_url)) as pg_proxy,
            FaultProxy(("127.0.0.1", moto_port)) as aws_proxy,
        ):
            pg_proxy.latency(db_rtt_ms / 2, db_rtt_ms / 2)
            aws_proxy.latency(send_ms / 2, send_ms / 2)
            endpoint = f"http://127.0.0.1:{aws_proxy.port}"
            sqs = boto3.client(
                "sqs",
                endpoint_url=f"http://127.0.0.1:{moto_port}",
                region_name="us-east-1",
                aws_access_key_id="bench",
                aws_secret_access_key="bench",  # noqa: S106 - moto
            )
            queue = sqs.create_queue(QueueName="webhook-inbox-processing")["QueueUrl"]
            yield {
                "server": server,
                "proxy": pg_proxy,
                "via_proxy": via_proxy,
                "endpoint": endpoint,
                "moto_endpoint": f"http://127.0.0.1:{moto_port}",
                "queue": queue,
                "sqs": sqs,
            }
    finally:
        moto.stop()
        server.stop()


def function_env(infra: dict[str, Any], database_url: str) -> dict[str, str]:
    """What the template gives every function, pointed at the bench's database and moto."""
    return {
        "DATABASE_URL": database_url,
        "PROCESSING_QUEUE_URL": infra["queue"],
        "AWS_ENDPOINT_URL": infra["endpoint"],
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "webhook-inbox",  # the default stack name
        "POWERTOOLS_METRICS_NAMESPACE": "WebhookInbox",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "OUTBOX_DESTINATION": "eventbridge",
        "OUTBOX_EVENT_BUS_NAME": "default",
        "MAX_ATTEMPTS": "8",
        "PAYLOAD_RETENTION_DAYS": "30",
        "KEY_RETENTION_DAYS": "90",
    }


def _database_for(infra: dict[str, Any], tree: Path, name: str) -> str:
    """A database migrated by ``tree``'s own migrations, reached through the proxy; where the
    tree partitions its inbox (and its outbox), switched as the sweeper switches them a day
    after their migrations
    (the row ids, and so the log lines that name them, are a deployed stack's)."""
    url = infra["server"].create_database(name)
    script = (
        "import sys, psycopg; sys.path[:0] = sys.argv[2:4]\n"
        "from webhook_inbox.store.migrate import migrate\n"
        "with psycopg.connect(sys.argv[1]) as c:\n"
        "    migrate(c); migrate(c, package='webhook_inbox_app')\n"
        "try:\n"
        "    from webhook_inbox.store import partitions\n"
        "except ImportError:\n"
        "    partitions = None\n"
        "try:\n"
        "    from webhook_inbox.store import partition_switch\n"
        "except ImportError:\n"
        "    partition_switch = None\n"
        "if partition_switch is not None:\n"
        "    with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
        "        for t in partitions.TABLES:\n"
        "            partition_switch.switch_to_partitions(c, t)\n"
        "            partitions.create_ahead(c, days=2, table=t)\n"
        "elif partitions is not None:\n"
        "    with psycopg.connect(sys.argv[1], autocommit=True) as c:\n"
        "        partitions.switch_to_partitions(c); partitions.create_ahead(c, days=2)\n"
    )
    subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            url,
            str(tree / "layers" / "shared"),
            str(tree / "application"),
        ],
        check=True,
        capture_output=True,
    )
    proxied: str = infra["via_proxy"](url, infra["proxy"])
    return proxied


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AWS_", "POWERTOOLS"))
    }
    result = subprocess.run(
        [sys.executable, "-m", "bench.cost", _CHILD_MARK, json.dumps(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{spec['function']} of {spec['tree']} failed:\n{result.stderr[-3000:]}"
            f"\n{result.stdout[-2000:]}"
        )
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def measure(trees: dict[str, Path], args: argparse.Namespace) -> dict[str, dict[str, Measured]]:
    measured = {label: {f: Measured() for f in FUNCTIONS} for label in trees}
    with infrastructure(args.db_rtt_ms, args.send_ms) as infra:
        for round_no in range(args.rounds):
            order = list(trees.items())
            if round_no % 2:
                order.reverse()  # drift and the machine's other load hit both alike
            for label, tree in order:
                url = _database_for(infra, tree, f"wi_cost_{label}_{round_no}_{os.getpid()}")
                env = {
                    **function_env(infra, url),
                    # The tree's own: an older tree does not know a newer tree's schemes.
                    "PROVIDERS_CONFIG_FILE": str(tree / "events" / "providers.local.json"),
                }
                for function in FUNCTIONS:
                    spec = {
                        "tree": str(tree),
                        "function": function,
                        "env": env,
                        "deliveries": args.deliveries,
                        "duplicate_share": args.duplicate_share,
                        "batch_size": args.batch_size,
                        "moto_endpoint": infra["moto_endpoint"],
                        "sweeps": args.sweeps,
                        "send_ms": args.send_ms,
                    }
                    with draining(infra["sqs"], infra["queue"]):
                        measured[label][function].add(run_child(spec))
    return measured


@contextlib.contextmanager
def draining(sqs: Any, queue_url: str) -> Iterator[None]:
    """Keep the queue (nearly) empty while a function runs, receiving and deleting ten
    messages at a time as the event source mapping would.

    moto's SendMessage slows down with the queue's depth (about 4 ms more per 300 messages
    waiting, measured here), which real SQS does not; the deliveries of a run would otherwise
    pay for the messages of every run before them. Drained directly, not through the proxy.
    """
    import threading

    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            found = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
            messages = found.get("Messages", [])
            if not messages:
                stop.wait(0.05)
                continue
            sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[
                    {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                    for n, m in enumerate(messages)
                ],
            )

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# --- the bill ----------------------------------------------------------------------------------


@dataclass
class FunctionBill:
    invocations_per_webhook: float
    gb_seconds: float  # per invocation, INIT share included
    log_bytes: float  # per invocation: the function's own output plus the runtime's lines
    own_bytes: float
    platform_bytes: float
    log_events: float


def function_bill(
    m: Measured,
    *,
    memory_mb: int,
    logging_config: dict[str, Any],
    per_webhook: float,
    workload: Workload,
) -> FunctionBill:
    billed = [billed_ms(w, c, memory_mb) for w, c in zip(m.wall_ms, m.cpu_ms, strict=True)]
    # The sweeper's first run after the mix publishes the whole outbox at once; a scheduled run
    # in the steady state finds a minute's worth: take its median run, not the mean.
    typical = statistics.median if per_webhook < 1 / workload.batch_size else statistics.mean
    init_ms = statistics.median(
        billed_ms(w, c, memory_mb) for w, c in zip(m.init_wall_ms, m.init_cpu_ms, strict=True)
    )
    gb = memory_mb / 1024
    gb_seconds = typical(billed) / 1000 * gb + workload.cold_start_rate * init_ms / 1000 * gb
    used = math.ceil(statistics.median(m.peak_rss_mb))
    warm = platform_lines(
        logging_config,
        duration_ms=statistics.median(m.wall_ms),
        memory_mb=memory_mb,
        used_mb=used,
        init_ms=None,
    )
    cold = platform_lines(
        logging_config,
        duration_ms=statistics.median(m.wall_ms),
        memory_mb=memory_mb,
        used_mb=used,
        init_ms=init_ms,
    )
    rate = workload.cold_start_rate
    platform = (1 - rate) * sum(len(s) + 1 for s in warm) + rate * sum(len(s) + 1 for s in cold)
    own = typical(m.bytes)
    events = typical(m.line_counts) + len(warm)
    return FunctionBill(per_webhook, gb_seconds, own + platform, own, platform, events)


@dataclass
class Bill:
    """USD per million webhooks, by item."""

    items: dict[str, float]
    floor_items: tuple[str, ...]
    log_bytes_per_webhook: float
    log_bytes_by_function: dict[str, float]

    @property
    def total(self) -> float:
        return sum(v for k, v in self.items.items() if not k.startswith("outbox"))

    @property
    def floor(self) -> float:
        return sum(self.items[k] for k in self.floor_items)


def bill(  # noqa: PLR0917 - one bill, all its inputs
    measured: dict[str, Measured],
    deployment: Deployment,
    endpoint: str,
    prices: Prices,
    workload: Workload,
    ingest_p50_ms: float,
) -> Bill:
    per_webhook = per_webhook_invocations(workload)
    # A webhook's ingest count includes its share of duplicate deliveries: per stored event.
    bills = {
        f: function_bill(
            measured[f],
            memory_mb=deployment.memory_mb[f],
            logging_config=deployment.logging[f],
            per_webhook=per_webhook[f],
            workload=workload,
        )
        for f in FUNCTIONS
    }
    million = 1e6
    items: dict[str, float] = {}
    if endpoint == "HttpApi":
        items["endpoint: HTTP API requests"] = prices.http_api_per_million
    else:
        items["endpoint: Function URL"] = prices.function_url_per_million
    items["Lambda requests"] = (
        sum(b.invocations_per_webhook for b in bills.values()) * prices.lambda_requests_per_million
    )
    # SendMessage per webhook; the event source mapping's ReceiveMessage and DeleteMessageBatch
    # once per batch (each well under 64 KB: one request each).
    items["SQS requests"] = (1 + 2 / workload.batch_size) * prices.sqs_per_million
    items["Lambda GB-seconds (incl. billed INIT)"] = (
        sum(b.invocations_per_webhook * b.gb_seconds for b in bills.values())
        * prices.lambda_gb_second_arm
        * million
    )
    log_bytes = {
        f: b.invocations_per_webhook * (b.log_bytes + b.log_events * workload.event_overhead_bytes)
        for f, b in bills.items()
    }
    items["CloudWatch Logs: functions"] = sum(
        n / prices.gb_bytes * deployment.logs_price(f, prices) * million
        for f, n in log_bytes.items()
    )
    if endpoint == "HttpApi" and deployment.access_log_format:
        line = access_log_line(deployment.access_log_format, _access_samples(ingest_p50_ms))
        access = len(line) + 1 + workload.event_overhead_bytes
        items["CloudWatch Logs: API access log"] = (
            access / prices.gb_bytes * deployment.logs_price("access", prices) * million
        )
    items["outbox: EventBridge PutEvents"] = (
        workload.outbox_messages_per_webhook * prices.eventbridge_per_million
    )
    floor = ("Lambda requests", "SQS requests", next(k for k in items if k.startswith("endpoint")))
    return Bill(items, floor, sum(log_bytes.values()), log_bytes)


def _access_samples(latency_ms: float) -> dict[str, str]:
    return {
        "$context.requestId": "Jx5OxjPUoAMEVxA=",
        "$context.identity.sourceIp": "203.0.113.10",
        "$context.requestTime": "30/Nov/2026:10:00:00 +0000",
        "$context.routeKey": "POST /webhooks/{provider}",
        "$context.path": "/webhooks/stripe",
        "$context.status": "202",
        "$context.protocol": "HTTP/1.1",
        "$context.responseLength": "22",
        "$context.responseLatency": str(round(latency_ms + 2)),
        "$context.integrationStatus": "202",
        "$context.integrationLatency": str(round(latency_ms)),
        "$context.integration.error": "-",
        "$context.integrationErrorMessage": "-",
    }


# --- the report --------------------------------------------------------------------------------


def _p(samples: list[float], q: float) -> float:
    return memory_sizing.percentile(samples, q)


def per_webhook_invocations(workload: Workload) -> dict[str, float]:
    """Invocations per webhook: ingest per delivery, the processor per batch, the sweeper's
    minute spread over the month's webhooks."""
    return {
        "ingest": 1.0,
        "processor": 1 / workload.batch_size,
        "sweeper": SCHEDULED_RUNS_PER_MONTH / workload.webhooks_per_month,
    }


def memory_table(found: dict[str, Any]) -> list[list[str]]:
    """One row per function and size from :func:`memory_sizing.measurements`; the sweeper's
    runs with nothing to publish and those that drained the mix's outbox apart."""
    rows = []
    functions = found["functions"]
    groups = [
        ("ingest", functions["ingest"]),
        ("processor", functions["processor"]),
        ("sweeper, nothing to publish", functions["sweeper"]),
        (
            f"sweeper, draining up to {functions['sweeper']['backlog']['published']} messages",
            {**functions["sweeper"]["backlog"], "peak_rss_mb": functions["sweeper"]["peak_rss_mb"]},
        ),
    ]
    for label, entry in groups:
        sizes = {int(mb): f for mb, f in entry["sizes"].items()}
        chosen = memory_sizing.rule_size({mb: f["p99"] for mb, f in sizes.items()})
        for mb in SIZES_MB:
            bigger = [size for size in SIZES_MB if size > mb]
            figures = sizes[mb]
            rows.append(
                [
                    label,
                    f"{mb}",
                    f"{entry['peak_rss_mb']:.0f}",
                    f"{figures['p50']:.0f} / {figures['p99']:.0f}",
                    f"{figures['p99'] / sizes[bigger[0]]['p99']:.2f}x" if bigger else "",
                    "**the rule's**" if mb == chosen else "",
                    f"{figures['init_ms']:.0f}",
                    f"{figures['cold_ms']:.0f}" if "cold_ms" in figures else "",
                    f"${figures['usd_per_million']:.4f}",
                ]
            )
    return rows


def render(  # noqa: PLR0917 - one report, all its inputs
    results: dict[str, dict[str, Measured]],
    deployments: dict[str, Deployment],
    prices: Prices,
    workload: Workload,
    args: argparse.Namespace,
    command: str,
    memory_found: dict[str, Any],
) -> str:
    from bench.common import table

    lines = ["## Cost per million webhooks (all in)", "", f"`{command}` — {_machine()}.", ""]
    lines += [
        f"Mix: {args.deliveries} signed Stripe deliveries per round"
        f" ({args.duplicate_share:.0%} sent twice, each right behind its original),"
        f" processor batches of {workload.batch_size},"
        f" {args.sweeps} sweeps;"
        f" {args.rounds} rounds, trees alternating. PostgreSQL round trip {args.db_rtt_ms} ms and"
        f" every AWS call {args.send_ms} ms, injected by `tests/faults/proxy.py` (moto behind it"
        " for SQS). Per webhook = per stored event: its deliveries (duplicates included), a"
        f" {1 / workload.batch_size:g} share of a batch, and the sweeper's"
        f" {SCHEDULED_RUNS_PER_MONTH:,} runs a month spread over"
        f" {workload.webhooks_per_month:,.0f} webhooks a month. Cold-start rate"
        f" {workload.cold_start_rate:.1%} of invocations (billed INIT).",
        "",
    ]
    timing_rows, log_rows = [], []
    bills: dict[tuple[str, str], Bill] = {}
    for label, m in results.items():
        ingest = m["ingest"]
        batch = m["processor"]
        p50 = _p(ingest.wall_ms, 50)
        timing_rows.append(
            [
                label,
                f"{p50:.2f} / {_p(ingest.wall_ms, 99):.2f}",
                f"{statistics.median(ingest.cpu_ms):.2f}",
                f"{statistics.mean(ingest.rig_ms):.2f}",
                f"{_p(batch.wall_ms, 50):.1f} / {_p(batch.wall_ms, 99):.1f}",
                f"{statistics.median(m['sweeper'].wall_ms):.0f}",
                " / ".join(f"{statistics.median(m[f].peak_rss_mb):.0f}" for f in FUNCTIONS),
            ]
        )
        for endpoint in ("HttpApi", "FunctionUrl"):
            bills[(label, endpoint)] = bill(m, deployments[label], endpoint, prices, workload, p50)
        b = bills[(label, "HttpApi")]
        deployment = deployments[label]
        access_bytes = (
            len(access_log_line(deployment.access_log_format, _access_samples(p50))) + 1
            if deployment.access_log_format
            else 0
        )
        log_rows.append(
            [
                label,
                *(f"{b.log_bytes_by_function[f]:.0f}" for f in FUNCTIONS),
                f"**{b.log_bytes_per_webhook:.0f}**",
                f"{access_bytes} ({deployment.log_class.get('access', 'STANDARD').lower()})",
                ", ".join(f"{f} {deployments[label].memory_mb[f]}" for f in FUNCTIONS),
                deployments[label].logging["ingest"].get("LogFormat", "Text")
                + " / "
                + ", ".join(
                    f"{f} {deployments[label].logging[f].get('SystemLogLevel', '-')}"
                    for f in FUNCTIONS
                ),
            ]
        )
    labels = list(results)
    if len(labels) == 2:
        base, new = labels
        ratio = _p(results[new]["ingest"].wall_ms, 50) / _p(results[base]["ingest"].wall_ms, 50)
        timing_rows.append([f"{new} / {base}", f"{ratio:.2f}x (p50)", "", "", "", "", ""])
    lines += [
        "Time (this machine, wall clock with the injected latency):",
        "",
        table(
            [
                "tree",
                "ingest p50 / p99 ms",
                "ingest CPU ms",
                "ingest: rig's wait taken off, mean ms",
                "processor batch p50 / p99 ms",
                "sweep ms",
                "peak RSS MB (i/p/s)",
            ],
            timing_rows,
        ),
        "",
        _rig_note(results[labels[-1]]["ingest"], deployments[labels[-1]], prices, args.send_ms),
        "",
    ]
    lines += [
        "Log bytes per webhook (each function's own output, captured, plus the runtime's"
        " lines for the template's LoggingConfig; the access log's line rendered from the"
        " template's format; each priced by its log group's class):",
        "",
        table(
            [
                "tree",
                "ingest",
                "processor",
                "sweeper",
                "total",
                "HTTP API access log, per request (class)",
                "memory MB",
                "log format / system level",
            ],
            log_rows,
        ),
        "",
    ]
    items = list(next(iter(bills.values())).items)
    header = ["USD per million webhooks", *[f"{lab}, {ep}" for lab, ep in bills]]
    rows = []
    keys: list[str] = []
    for b in bills.values():
        keys += [k for k in b.items if k not in keys]
    for key in keys:
        rows.append(
            [key, *(f"{b.items[key]:.4f}" if key in b.items else "—" for b in bills.values())]
        )
    rows.append(["**all in (outbox excluded)**", *(f"**{b.total:.3f}**" for b in bills.values())])
    rows.append(
        ["floor (endpoint + Lambda + SQS requests)", *(f"{b.floor:.3f}" for b in bills.values())]
    )
    rows.append(["**all in / floor**", *(f"**{b.total / b.floor:.3f}x**" for b in bills.values())])
    del items
    lines += [table(header, rows), ""]
    lines += [
        "Prices and assumptions (each one an argument of the script): "
        + ", ".join(f"`{k}` {v:g}" for k, v in vars(prices).items())
        + "; "
        + ", ".join(f"`{k}` {v:g}" for k, v in vars(workload).items())
        + ".",
        "",
    ]
    current = labels[-1]
    lines += [
        f"Memory (tree `{current}`): billed duration per invocation at each size, from the"
        f" measured wait and CPU time (CPU scaled by {LAMBDA_FULL_VCPU_MB} MB / size below"
        " one vCPU), INIT at that size (ingest: with its first delivery, a cold start), and the"
        " GB-seconds cost per million invocations; the defaults chosen from it are in"
        ' docs/costs.md, "Memory sizes":',
        "",
        table(
            [
                "function",
                "MB",
                "peak RSS MB",
                "billed p50 / p99 ms",
                "p99 vs next size up",
                f"cheapest within {WITHIN_NEXT:.2f}x of the next",
                "INIT ms",
                "INIT + first call ms",
                "USD per million invocations",
            ],
            memory_table(memory_found),
        ),
        "",
    ]
    lines += ["A line of each (first invocation, as captured):", ""]
    for label, m in results.items():
        for function in FUNCTIONS:
            for sample in m[function].sample_lines[:2]:
                lines.append(f"- {label} {function} ({len(sample.encode())} B): `{sample[:400]}`")
    return "\n".join(lines)


def _rig_note(ingest: Measured, deployment: Deployment, prices: Prices, send_ms: float) -> str:
    """What the rig's own wait, taken off each delivery's, would have cost had it been billed."""
    rig_ms = statistics.mean(ingest.rig_ms)
    memory = deployment.memory_mb["ingest"]
    usd = rig_ms / 1000 * memory / 1024 * prices.lambda_gb_second_arm * 1e6
    return (
        f"Each AWS call counts as the injected {send_ms:g} ms round trip plus its own CPU time:"
        " what it waited beyond that was the rig's (moto's service time, the new connection"
        " werkzeug's server makes every request open, the proxy's scheduling) and is taken off"
        f" the invocation's wall time, {rig_ms:.2f} ms per ingest delivery on average here. Left"
        f" in, at {memory} MB it would add ${usd:.4f} per million webhooks to the GB-seconds"
        " below. The CPU of opening each connection stays in (a warm function keeps its"
        " connection to SQS alive)."
    )


def _machine() -> str:
    import platform

    cpu = platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {os.cpu_count()} CPUs ({cpu}),"
        f" load average {os.getloadavg()[0]:.1f} at the end · Python {platform.python_version()}"
    )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == _CHILD_MARK:
        try:
            child_main(sys.argv[2:])
        except BaseException:
            # The child's own streams are captured: say why on the real one.
            import traceback

            sys.__stderr__.write(traceback.format_exc())
            raise
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside this one")
    parser.add_argument(
        "--baseline-name",
        default="baseline",
        help="what the baseline is, as the tables name it (say what it is, not its commit)",
    )
    parser.add_argument("--deliveries", type=int, default=600)
    parser.add_argument("--duplicate-share", type=float, default=0.1)
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db-rtt-ms", type=float, default=1.0)
    parser.add_argument("--send-ms", type=float, default=10.0)
    for name, value in {**vars(Prices()), **vars(Workload())}.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    prices = Prices(**{k: getattr(args, k) for k in vars(Prices())})
    workload = Workload(**{k: getattr(args, k) for k in vars(Workload())})
    trees = {}
    if args.baseline:
        trees[args.baseline_name] = args.baseline.resolve()
    trees["this tree"] = ROOT
    command = "python -m bench.cost " + shlex.join(sys.argv[1:])
    results = measure(trees, args)
    deployments = {label: Deployment.of(tree) for label, tree in trees.items()}
    memory_found = memory_sizing.measurements(
        results["this tree"],
        prices.lambda_gb_second_arm,
        per_webhook_invocations(workload),
        f"`{command}` ({time.strftime('%Y-%m-%d', time.gmtime())}, this tree)",
    )
    text = render(results, deployments, prices, workload, args, command, memory_found)
    if not args.no_write:
        from bench.common import write_section

        write_section("cost", text)
        memory_sizing.write(memory_found)
    print(text)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        main()
