"""bench.cost's rig, the parent's side: the database and moto behind latency-injecting proxies,
each tree's own migrated database, one child per (tree, function, round), the queue drained
meanwhile. :class:`Measured` gathers what the children found.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cost_child import _CHILD_MARK, ROOT

FUNCTIONS = ("ingest", "processor", "sweeper")


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
