"""The chaos soak: providers sending through real ingest processes while faults are injected.

``run_soak`` plans N events (out-of-order subscription versions, creates and deletes racing,
unhandled and poison events), delivers them with ≥ 30 % duplicate redeliveries in shuffled
order from concurrent sender threads that retry every non-2xx answer on a compressed Svix
schedule, and meanwhile SIGKILLs processor workers, terminates database backends, restarts the
database and lets the workers' SQS sends and outbox publishes fail. Then it stops the faults,
lets the sweepers run, and checks with SQL that nothing was lost or applied twice.

With ``fault_layer`` the workers reach PostgreSQL and the moto server through two fault proxies
(``tests/faults/proxy.py``) that add latency, close idle connections, and follow a plan of
longer faults one after the other: PostgreSQL blackholed, SQS hanging (both accept the
connection and never answer), a database restart, and quiet periods (no deliveries until every
idle connection was closed, then a short window in which nothing else is injected: every answer
there is a first request after idle). Every non-2xx answer must then be a 503 with Retry-After.

The plan may also lose wake-ups after their stamp (issue 24): SQS sends whose answer is lost
(queued, but the caller sees an error), a purge of the processing queue, an ingest worker
SIGKILLed between the claim's stamp and its send; and delay the database's answers to ingest
past its deadline after the claim committed (503 after commit; ingest has a PostgreSQL proxy of
its own for that). With ``steady_tail_s`` the traffic goes on at the same rate that long after
the plan, with every fault off. After the drain, :mod:`tests.reliability.soak_terminal` reports
the longest time from an event's claim to its terminal state per fault kind.
"""

from __future__ import annotations

import heapq
import http.client
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.faults.proxy import FaultProxy, pg_upstream, via_proxy
from tests.reliability import soak_terminal
from tests.reliability.infra import (
    DB_PASSWORD_MARKER,
    DedicatedPostgres,
    MotoServer,
    free_port,
    worker_environment,
)
from tests.support import ROOT

PAYLOAD_MARKER = "PAYLOAD-MARKER"
STANDARD_WEBHOOKS_SECRET = "whsec_c29hay1vbmx5LWV4YW1wbGUtc2VjcmV0LWtleS0xMjM0NTY3OA=="
STRIPE_SECRET = "whsec_soak_only_stripe_secret_value_4b1d"
SOAK_PROVIDERS = {
    "providers": {
        "example": {
            "scheme": "standard-webhooks",
            "secrets": [{"value": STANDARD_WEBHOOKS_SECRET}],
        },
        "stripe": {"scheme": "stripe", "secrets": [{"value": STRIPE_SECRET}]},
    }
}
SECRETS = (STANDARD_WEBHOOKS_SECRET, STRIPE_SECRET, DB_PASSWORD_MARKER)

# Svix's retry schedule (immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), compressed
# 600-fold: an outage of seconds here stands for one of minutes to hours in production.
SVIX_SCHEDULE_S = (0, 5, 300, 1800, 7200, 18000, 36000, 36000)
COMPRESSION = 600.0
RETRY_SCHEDULE_S = tuple(s / COMPRESSION for s in SVIX_SCHEDULE_S)
# How long the sender waits for an answer before it counts the attempt failed (Svix: 15 s).
PROVIDER_TIMEOUT_S = 15.0
SUBSCRIPTION_STATUSES = ("trialing", "active", "past_due", "canceled", "unpaid")
TERMINAL = ("processed", "ignored", "dead_letter")
PURGE_INTERVAL_S = 61.0  # SQS (and moto's server) refuse a second PurgeQueue within 60 s


@dataclass(frozen=True)
class PlannedEvent:
    provider: str
    event_id: str
    event_type: str
    kind: str  # subscription | customer_created | customer_deleted | unhandled | poison
    key: str  # subscription or customer id
    body: bytes
    version: int = 0
    status: str = ""
    customer_id: str = ""

    @property
    def expected_status(self) -> str:
        return {"unhandled": "ignored", "poison": "dead_letter"}.get(self.kind, "processed")


@dataclass
class Delivery:
    event: PlannedEvent
    copies: int = 1  # >1: the same delivery sent concurrently to different ingest servers
    attempt: int = 0


@dataclass
class SoakSettings:
    events: int = 2000
    seed: int = 8
    duplicate_rate: float = 0.36
    concurrent_duplicate_rate: float = 0.08
    sender_threads: int = 8
    ingest_workers: int = 2
    processor_workers: int = 3
    sweepers: int = 2
    sqs_fault_rate: float = 0.04
    publish_fault_rate: float = 0.1
    kill_every_s: float = 4.0
    terminate_every_s: float = 1.5
    db_restarts: int = 1
    db_down_s: float = 1.0
    drain_timeout_s: float = 120.0
    # The fault layer (off: the workers connect directly, as before).
    fault_layer: bool = False
    latency_ms: float = 1.0  # per round trip, half each way
    latency_jitter_ms: float = 0.5
    idle_close_s: float = 3.0  # RDS Proxy's IdleClientTimeout, compressed
    pg_blackholes: int = 0
    pg_blackhole_s: float = 10.0
    sqs_hangs: int = 0
    sqs_hang_s: float = 10.0
    quiet_periods: int = 0
    after_idle_window_s: float = 3.0
    plan_gap_s: float = 3.0  # between two planned faults
    # Wake-ups lost after the stamp, and 503s after the claim committed (issue 24).
    lost_send_windows: int = 0  # windows in which SQS answers are lost at lost_send_rate
    lost_send_s: float = 3.0
    lost_send_rate: float = 0.3
    purges: int = 0  # PurgeQueue on the processing queue
    send_kills: int = 0  # an ingest worker SIGKILLed between its stamp and its send
    slow_answers: int = 0  # windows in which ingest's database answers come back late
    slow_answer_s: float = 4.0
    # Latency on the way back: past ingest's answer deadline (statement timeout + 1 s = 4 s).
    slow_answer_ms: float = 5000.0
    steady_tail_s: float = 0.0  # traffic at the same rate this long after the plan, faults off


@dataclass
class SoakReport:
    settings: SoakSettings
    deliveries: int = 0
    duplicates: int = 0
    concurrent_duplicates: int = 0
    retries: int = 0
    acked: int = 0
    gave_up: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    kills_mid_batch: int = 0
    orphaned_leases: int = 0
    lost: int = 0
    double_applied: int = 0
    violations: list[str] = field(default_factory=list)
    published: int = 0
    republished: int = 0
    max_attempts: int = 0
    leaks: list[str] = field(default_factory=list)
    seconds: float = 0.0
    drain_seconds: float = 0.0
    # Answers that break the 503-with-Retry-After rule, and the first requests after idle.
    no_answer: int = 0
    without_retry_after: int = 0
    after_idle_answers: int = 0
    idle_failures: int = 0
    # Requests whose ingest worker was SIGKILLed under them (API Gateway would answer 502).
    connection_lost: int = 0
    terminal: soak_terminal.TerminalTimes | None = None

    def summary(self) -> str:
        faults = " ".join(f"{k}={v}" for k, v in sorted(self.faults.items()))
        return (
            f"soak: events={self.settings.events} deliveries={self.deliveries} "
            f"duplicates={self.duplicates} ({self.duplicates / self.settings.events:.0%}, "
            f"{self.concurrent_duplicates} concurrent) sender_retries={self.retries} "
            f"acked={self.acked} gave_up={self.gave_up} | faults: {faults} "
            f"(kills mid-batch={self.kills_mid_batch}, leases orphaned={self.orphaned_leases}) | "
            f"published={self.published} "
            f"republished={self.republished} max_attempts={self.max_attempts} | "
            f"lost={self.lost} double-applied={self.double_applied} "
            f"| {self.seconds:.1f} s (drain {self.drain_seconds:.1f} s)"
            + (self.fault_layer_summary() if self.settings.fault_layer else "")
            + (f" | {self.terminal.summary()}" if self.terminal else "")
        )

    def fault_layer_summary(self) -> str:
        s = self.settings
        failing = {code: n for code, n in sorted(self.statuses.items()) if not 200 <= code < 300}
        return (
            f" | fault layer: latency {s.latency_ms:g}±{s.latency_jitter_ms:g} ms, idle close "
            f"{s.idle_close_s:g} s, pg blackhole {s.pg_blackholes}x{s.pg_blackhole_s:g} s, "
            f"sqs hang {s.sqs_hangs}x{s.sqs_hang_s:g} s, quiet {s.quiet_periods}, "
            f"lost sends {s.lost_send_windows}x{s.lost_send_s:g} s at {s.lost_send_rate:.0%}, "
            f"purges {s.purges}, kills before send {s.send_kills}, slow answers "
            f"{s.slow_answers}x{s.slow_answer_s:g} s +{s.slow_answer_ms:g} ms, steady tail "
            f"{s.steady_tail_s:g} s; "
            f"non-2xx {failing} "
            f"(without Retry-After {self.without_retry_after}, no answer {self.no_answer}, "
            f"connection lost with a killed worker {self.connection_lost}); "
            f"answers after idle {self.after_idle_answers}, failed {self.idle_failures}"
        )


# --- the plan ------------------------------------------------------------------------------


def _body(
    provider: str, event_id: str, event_type: str, data: dict[str, Any], **extra: Any
) -> bytes:
    marker = f"{PAYLOAD_MARKER} {event_id}"
    if provider == "stripe":
        document = {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": extra.get("created", 1_700_000_000),
            "data": {"object": data},
            "note": marker,
        }
    else:
        document = {
            "type": event_type,
            "schema_version": extra.get("schema_version", 1),
            "data": data,
            "note": marker,
        }
    return json.dumps(document, separators=(",", ":")).encode()


def plan_events(count: int, rng: random.Random) -> list[PlannedEvent]:
    """``count`` events: ~55 % subscription updates over count/8 subscriptions (versions out of
    order), ~35 % customer creates and deletes, ~5 % unhandled types, ~5 % poison (unsupported
    schema_version, which must dead-letter without touching the domain)."""
    events: list[PlannedEvent] = []
    serial = itertools.count(1)

    def new_id(provider: str) -> str:
        return f"{'evt' if provider == 'stripe' else 'msg'}_soak{next(serial):07d}"

    subscription_count = max(1, count // 8)
    versions: dict[tuple[str, str], int] = defaultdict(int)
    customers: list[tuple[str, str]] = []
    while len(events) < count:
        provider = rng.choice(("example", "stripe"))
        roll = rng.random()
        event_id = new_id(provider)
        if roll < 0.55:
            sub = f"sub_{rng.randrange(subscription_count):05d}"
            versions[(provider, sub)] += 1
            version = versions[(provider, sub)]
            customer = f"cus_{rng.randrange(10_000):05d}"
            status = rng.choice(SUBSCRIPTION_STATUSES)
            data: dict[str, Any] = {"id": sub, "status": status}
            if provider == "stripe":
                data["customer"] = customer
                body = _body(
                    provider,
                    event_id,
                    "customer.subscription.updated",
                    data,
                    created=1_700_000_000 + version,
                )
                event_type = "customer.subscription.updated"
            else:
                data.update(customer_id=customer, version=version)
                event_type = "subscription.updated"
                body = _body(provider, event_id, event_type, data)
            events.append(
                PlannedEvent(
                    provider,
                    event_id,
                    event_type,
                    "subscription",
                    sub,
                    body,
                    version,
                    status,
                    customer,
                )
            )
        elif roll < 0.90:
            deletable = [c for c in customers if c[0] == provider]
            if deletable and rng.random() < 0.35:
                customers.remove(deletable[0])
                cus = deletable[0][1]
                event_type, kind = "customer.deleted", "customer_deleted"
            else:
                cus = f"cus_{len(events):06d}"
                customers.append((provider, cus))
                event_type, kind = "customer.created", "customer_created"
            body = _body(provider, event_id, event_type, {"id": cus})
            events.append(PlannedEvent(provider, event_id, event_type, kind, cus, body))
        elif roll < 0.95:
            body = _body(provider, event_id, "invoice.paid", {"id": f"in_{len(events)}"})
            events.append(PlannedEvent(provider, event_id, "invoice.paid", "unhandled", "", body))
        else:
            provider = "example"
            event_id = new_id(provider)
            sub = f"sub_{rng.randrange(subscription_count):05d}"
            data = {"id": sub, "status": "active", "version": 10_000}
            body = _body(provider, event_id, "subscription.updated", data, schema_version=2)
            events.append(
                PlannedEvent(
                    provider,
                    event_id,
                    "subscription.updated",
                    "poison",
                    sub,
                    body,
                    10_000,
                    "active",
                )
            )
    return events


def plan_deliveries(
    events: list[PlannedEvent], settings: SoakSettings, rng: random.Random
) -> list[Delivery]:
    """Every event once, plus redelivered duplicates, shuffled (a duplicate may come first)."""
    deliveries = [Delivery(e) for e in events]
    for event in events:
        if rng.random() < settings.duplicate_rate:
            copies = 2 if rng.random() < settings.concurrent_duplicate_rate else 1
            deliveries.append(Delivery(event, copies=copies))
        if rng.random() < 0.05:  # a provider that redelivers more than once
            deliveries.append(Delivery(event))
    rng.shuffle(deliveries)
    return deliveries


# --- the workers ---------------------------------------------------------------------------


class Workers:
    """The worker processes, restartable by role; logs per process in the control directory."""

    def __init__(
        self, control_dir: Path, env: dict[str, str], ingest_env: dict[str, str] | None = None
    ) -> None:
        self.control_dir = control_dir
        self.env = env
        self.ingest_env = ingest_env or {}  # ingest's own way to the database, if any
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ingest_ports: list[int] = []
        self.port_of: dict[str, int] = {}  # ingest worker -> its port
        self._serial = itertools.count(1)
        self._lock = threading.Lock()

    def start(self, role: str, **extra: str) -> str:
        name = f"{role}-{next(self._serial)}"
        log = (self.control_dir / f"{name}.log").open("wb")
        env = dict(self.env, SOAK_WORKER_NAME=name, **extra)
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.soak_workers", role],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        with self._lock:
            self.processes[name] = process
        return name

    def start_ingest(self, port: int | None = None) -> None:
        """A new ingest worker: on a new port, or on the port of one that died."""
        if port is None:
            port = free_port()
            self.ingest_ports.append(port)
        name = self.start("ingest", SOAK_PORT=str(port), **self.ingest_env)
        self.port_of[name] = port

    def replace_dead_ingest(self) -> list[int]:
        """Start a new ingest worker on the port of each one that died; returns the ports."""
        with self._lock:
            dead = [n for n in self.port_of if self.processes[n].poll() is not None]
        ports = [self.port_of.pop(name) for name in dead]
        for port in ports:
            self.start_ingest(port)
        return ports

    def running(self, role: str) -> list[str]:
        with self._lock:
            return [n for n, p in self.processes.items() if n.startswith(role) and p.poll() is None]

    def kill(self, name: str) -> None:
        with self._lock:
            process = self.processes[name]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)

    def stop_all(self, timeout_s: float = 15.0) -> None:
        (self.control_dir / "stop").touch()
        deadline = time.monotonic() + timeout_s
        for process in list(self.processes.values()):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def unexpected_exits(self) -> list[str]:
        """Workers that died on their own (not SIGKILLed by the soak, not stopped)."""
        return [
            f"{n} exited {p.returncode}"
            for n, p in self.processes.items()
            if p.returncode not in (0, -signal.SIGKILL, None)
        ]


def wait_for_ingest(ports: list[int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    for port in ports:
        while True:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                connection.request("POST", "/webhooks/nobody", body=b"{}")
                connection.getresponse().read()
                connection.close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ingest on port {port} did not come up") from None
                time.sleep(0.2)


# --- the sender ----------------------------------------------------------------------------


class Sender:
    """Provider-side delivery: sign at send time, POST, retry non-2xx on the compressed schedule."""

    def __init__(
        self,
        deliveries: list[Delivery],
        ports: list[int],
        report: SoakReport,
        *,
        spread_over_s: float = 0.0,
    ) -> None:
        from webhook_inbox.ingest.providers import load_config_text

        self.registry = load_config_text(json.dumps(SOAK_PROVIDERS))
        self.ports = ports
        self.report = report
        self.acked: set[tuple[str, str]] = set()
        self.answered_at: list[float] = []  # wall-clock time of every answer
        self.failed_at: list[float] = []  # ... and of every non-2xx one
        # Every answer per event, (wall-clock time, status): when a 503 came after the commit.
        self.answers: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
        self._down: set[int] = set()  # ports whose worker was killed, until it is replaced
        self._queue: list[tuple[float, int, Delivery]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._outstanding = len(deliveries)
        self._in_flight = 0
        self._busy: Counter[int] = Counter()  # requests under way per ingest port
        self._paused = threading.Event()
        self._done = threading.Event()
        now = time.monotonic()
        # First copies spread evenly over spread_over_s (0: all due at once), so that traffic
        # flows for as long as the fault plan runs.
        step = spread_over_s / max(len(deliveries), 1)
        for n, delivery in enumerate(deliveries):
            self._push(now + n * step, delivery)

    def pause_until_idle(self, timeout_s: float = 30.0) -> None:
        """Stop starting deliveries and wait for the ones under way to be answered."""
        self._paused.set()
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.01)

    def resume(self) -> None:
        self._paused.clear()

    def port_up(self, port: int) -> None:
        with self._lock:
            self._down.discard(port)

    def _push(self, due: float, delivery: Delivery) -> None:
        heapq.heappush(self._queue, (due, next(self._seq), delivery))

    def _post(self, event: PlannedEvent) -> tuple[int, str | None]:
        from webhook_inbox.ingest.providers import sign_delivery

        headers = sign_delivery(
            self.registry[event.provider],
            event.body,
            event_id=event.event_id if event.provider == "example" else None,
        ).headers
        port = self._pick_port()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PROVIDER_TIMEOUT_S)
        try:
            connection.request(
                "POST", f"/webhooks/{event.provider}", body=event.body, headers=headers
            )
            response = connection.getresponse()
            response.read()
            return response.status, response.getheader("Retry-After")
        except (ConnectionError, http.client.RemoteDisconnected):
            # The worker died under the request (or before accepting it): no answer, the
            # provider retries; API Gateway would send another worker the next request.
            with self._lock:
                self._down.add(port)
                self.report.connection_lost += 1
            return -1, None
        except OSError:
            return 0, None  # timed out: the provider retries
        finally:
            connection.close()
            with self._lock:
                self._busy[port] -= 1

    def _pick_port(self) -> int:
        """An ingest worker serving no request if there is one, as API Gateway hands a request
        to an idle Lambda environment (each worker serves one request at a time)."""
        with self._lock:
            ports = [p for p in self.ports if p not in self._down] or self.ports
            fewest = min(self._busy[port] for port in ports)
            port = random.choice([p for p in ports if self._busy[p] == fewest])
            self._busy[port] += 1
            return port

    def _send(self, delivery: Delivery) -> None:
        if delivery.copies > 1:
            answers: list[tuple[int, str | None]] = []
            threads = [
                threading.Thread(target=lambda: answers.append(self._post(delivery.event)))
                for _ in range(delivery.copies)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            answers = [self._post(delivery.event)]
        answered = time.time()
        key = (delivery.event.provider, delivery.event.event_id)
        with self._lock:
            # A request lost with its killed worker is counted apart (connection_lost).
            self.report.deliveries += len(answers)
            answers = [(status, retry_after) for status, retry_after in answers if status != -1]
            results = [status for status, _ in answers]
            self.report.statuses.update(status for status, _ in answers)
            for status, retry_after in answers:
                self.answered_at.append(answered)
                self.answers[key].append((answered, status))
                if 200 <= status < 300:
                    continue
                self.failed_at.append(answered)
                if status == 0:
                    self.report.no_answer += 1
                elif status != 503 or not retry_after:
                    self.report.without_retry_after += 1
            if any(200 <= s < 300 for s in results):
                self.acked.add((delivery.event.provider, delivery.event.event_id))
                self._outstanding -= 1
            elif delivery.attempt + 1 < len(RETRY_SCHEDULE_S):
                delivery.attempt += 1
                self.report.retries += 1
                self._push(time.monotonic() + RETRY_SCHEDULE_S[delivery.attempt], delivery)
            else:
                self.report.gave_up += 1
                self._outstanding -= 1
            if self._outstanding == 0:
                self._done.set()

    def _work(self, deadline: float) -> None:
        while not self._done.is_set() and time.monotonic() < deadline:
            with self._lock:
                item = self._queue[0] if self._queue else None
                if item is not None and item[0] <= time.monotonic() and not self._paused.is_set():
                    heapq.heappop(self._queue)
                    self._in_flight += 1
                else:
                    item = None
            if item is None:
                time.sleep(0.01)
                continue
            try:
                self._send(item[2])
            finally:
                with self._lock:
                    self._in_flight -= 1

    def run(self, threads: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        workers = [
            threading.Thread(target=self._work, args=(deadline,), daemon=True)
            for _ in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()) + 15)
        if not self._done.is_set():
            raise AssertionError(f"sender did not finish in {timeout_s:.0f} s")


# --- chaos ---------------------------------------------------------------------------------


def fault_plan(settings: SoakSettings) -> list[tuple[str, float]]:
    """The fault layer's long faults, in the order they run: (kind, seconds), interleaved."""
    kinds = [
        ("pg_blackhole", settings.pg_blackholes, settings.pg_blackhole_s),
        (
            "quiet",
            settings.quiet_periods,
            settings.idle_close_s + 1.5 + settings.after_idle_window_s,
        ),
        ("sqs_hang", settings.sqs_hangs, settings.sqs_hang_s),
        ("db_restart", settings.db_restarts, settings.db_down_s + 2.0),
        ("lost_send", settings.lost_send_windows, settings.lost_send_s),
        ("purge", settings.purges, 0.5),
        ("send_kill", settings.send_kills, 2.0),  # until the worker is replaced
        (
            "slow_answer",
            settings.slow_answers,
            settings.slow_answer_s + settings.slow_answer_ms / 1000,
        ),
    ]
    plan: list[tuple[str, float]] = []
    for round_ in range(max(count for _, count, _ in kinds)):
        plan += [(kind, seconds) for kind, count, seconds in kinds if round_ < count]
    return plan


def plan_seconds(settings: SoakSettings) -> float:
    return sum(seconds + settings.plan_gap_s for _, seconds in fault_plan(settings))


@dataclass
class FaultLayer:
    """The proxies between the workers and PostgreSQL / moto. Ingest reaches PostgreSQL through
    a proxy of its own (``ingest_pg``), so that its answers alone can be delayed; a blackhole
    or a restart hits both."""

    settings: SoakSettings
    pg: FaultProxy
    ingest_pg: FaultProxy
    moto: FaultProxy

    @classmethod
    def start(cls, settings: SoakSettings, db_url: str, moto_port: int) -> FaultLayer:
        layer = cls(
            settings,
            FaultProxy(pg_upstream(db_url)),
            FaultProxy(pg_upstream(db_url)),
            FaultProxy(("127.0.0.1", moto_port)),
        )
        for proxy in (layer.pg, layer.ingest_pg, layer.moto):
            proxy.start()
            layer.normal_latency(proxy)
            proxy.idle_timeout_s = settings.idle_close_s
        return layer

    def normal_latency(self, proxy: FaultProxy) -> None:
        half = self.settings.latency_ms / 2
        proxy.latency(up_ms=half, down_ms=half, jitter_ms=self.settings.latency_jitter_ms / 2)

    @property
    def pg_idle_closed(self) -> int:
        return self.pg.idle_closed + self.ingest_pg.idle_closed

    def stop(self) -> None:
        self.pg.stop()
        self.ingest_pg.stop()
        self.moto.stop()


class Chaos:
    """Faults on a timer while the sender runs: SIGKILL a processor worker (and start a new
    one, as Lambda would), terminate random backends, restart the database. With the fault
    layer, the database restarts run in the plan (:func:`fault_plan`) with its other faults."""

    def __init__(
        self,
        *,
        settings: SoakSettings,
        pg: DedicatedPostgres,
        dbname: str,
        url: str,
        workers: Workers,
        report: SoakReport,
        rng: random.Random,
        layer: FaultLayer | None = None,
        sender: Sender | None = None,
        queue: tuple[Any, str] | None = None,
    ) -> None:
        self.settings = settings
        self.pg = pg
        self.dbname = dbname
        self.url = url
        self.workers = workers
        self.report = report
        self.rng = rng
        self.layer = layer
        self.sender = sender
        self.queue = queue  # (SQS client, URL) of the processing queue, for the purges
        self.stop = threading.Event()
        self.killed: list[str] = []
        # (start, end) wall-clock windows right after a quiet period, with nothing injected.
        self.after_idle_windows: list[tuple[float, float]] = []
        # Every planned fault: (kind, start, end), wall clock.
        self.windows: list[tuple[str, float, float]] = []
        # Wake-ups lost by a purge: (time, row ids, their stamps as epoch seconds).
        self.purged: list[soak_terminal.WakeupLoss] = []
        self.cleared_at: float | None = None  # when the last fault of any kind stopped
        self._quiet = threading.Event()  # the timer's faults hold off while set
        self._calm = threading.Event()  # set once the plan is over: no more faults at all
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._plan = threading.Thread(target=self._run_plan, daemon=True)

    def start(self) -> None:
        self._thread.start()
        if self.layer is not None:
            self._plan.start()

    def wait_for_plan(self, timeout_s: float) -> None:
        if self.layer is not None:
            self._plan.join(timeout_s)

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(60)
        if self.layer is not None:
            self._plan.join(60)
        self.calm()

    def calm(self) -> None:
        """Every fault off for good (the timer's, the boto3 hooks', the plan's)."""
        if self._calm.is_set():
            return
        self._calm.set()
        (self.workers.control_dir / "faults.on").unlink(missing_ok=True)
        self.cleared_at = time.time()

    def _run_plan(self) -> None:
        assert self.layer is not None
        assert self.sender is not None
        for kind, seconds in fault_plan(self.settings):
            if self.stop.wait(self.settings.plan_gap_s):
                return
            started = time.time()
            if kind == "pg_blackhole":
                self._blackhole(seconds, self.layer.pg, self.layer.ingest_pg)
            elif kind == "sqs_hang":
                self._blackhole(seconds, self.layer.moto)
            elif kind == "db_restart":
                self.pg.restart(self.settings.db_down_s)
            elif kind == "lost_send":
                self._lose_sends(seconds)
            elif kind == "purge":
                self._purge()
            elif kind == "send_kill":
                self._kill_before_send()
            elif kind == "slow_answer":
                self._slow_answers(seconds)
            else:
                self._quiet_period()
            self.windows.append((kind, started, time.time()))
            self.report.faults[kind] += 1
        if self.settings.steady_tail_s:
            self.calm()  # the steady tail: traffic goes on, with nothing injected

    def _blackhole(self, seconds: float, *proxies: FaultProxy) -> None:
        for proxy in proxies:
            proxy.set_blackhole(True)
        try:
            self.stop.wait(seconds)
        finally:
            for proxy in proxies:
                proxy.set_blackhole(False)

    def _lose_sends(self, seconds: float) -> None:
        """SQS answers lost at the given rate: queued, but the caller sees an error."""
        switch = self.workers.control_dir / "lost_send.on"
        switch.touch()
        try:
            self.stop.wait(seconds)
        finally:
            switch.unlink(missing_ok=True)

    def _purge(self) -> None:
        """Every message of the processing queue gone (waiting and in flight)."""
        assert self.queue is not None
        sqs, queue_url = self.queue
        if self.purged:  # SQS allows one purge a minute
            self.stop.wait(self.purged[-1].at + PURGE_INTERVAL_S - time.time())
        sqs.purge_queue(QueueUrl=queue_url)
        self.purged.append(soak_terminal.snapshot_waiting(self.url, "purge"))

    def _kill_before_send(self, timeout_s: float = 20.0) -> None:
        """The next ingest worker about to send a wake-up dies first; a new one takes its
        port (API Gateway would start another environment)."""
        assert self.sender is not None
        trigger = self.workers.control_dir / "send_kill"
        trigger.touch()
        deadline = time.monotonic() + timeout_s
        while trigger.exists() and not self.stop.wait(0.05):
            if time.monotonic() > deadline:
                trigger.unlink(missing_ok=True)
                return  # no new event in time: nothing was killed (the count says so)
        replaced: list[int] = []
        while not replaced and time.monotonic() < deadline and not self.stop.wait(0.05):
            replaced = self.workers.replace_dead_ingest()
        wait_for_ingest(replaced)
        for port in replaced:
            self.sender.port_up(port)

    def _slow_answers(self, seconds: float) -> None:
        """ingest's database answers come back later than its deadline: its claims commit,
        and it answers 503. Nothing else is injected meanwhile (no kills, no failed sends), so
        that the time from the provider's retry to the terminal state is the wake-up's alone."""
        assert self.layer is not None
        proxy = self.layer.ingest_pg
        self._quiet.set()
        (self.workers.control_dir / "faults.on").unlink(missing_ok=True)
        # A connection waiting for its answer is not idle: the compressed idle close (seconds,
        # where RDS Proxy waits minutes) would cut it and ingest would retry on a fresh one.
        proxy.idle_timeout_s = None
        proxy.latency(up_ms=self.settings.latency_ms / 2, down_ms=self.settings.slow_answer_ms)
        try:
            self.stop.wait(seconds)
        finally:
            self.layer.normal_latency(proxy)
            self.stop.wait(self.settings.slow_answer_ms / 1000)  # the late answers arrive
            proxy.idle_timeout_s = self.settings.idle_close_s
            if not self._calm.is_set():
                (self.workers.control_dir / "faults.on").touch()
            self._quiet.clear()

    def _quiet_period(self) -> None:
        """No deliveries until the proxies closed every idle connection, then a window in
        which every answer is a first request after idle and nothing else is injected."""
        assert self.sender is not None
        self._quiet.set()
        try:
            self.sender.pause_until_idle()
            self.stop.wait(self.settings.idle_close_s + 1.5)
            opened = time.time()
            self.sender.resume()
            self.stop.wait(self.settings.after_idle_window_s)
            self.after_idle_windows.append((opened, time.time()))
        finally:
            self.sender.resume()
            self._quiet.clear()

    def _run(self) -> None:
        started = time.monotonic()
        next_kill = started + self.settings.kill_every_s
        next_terminate = started + self.settings.terminate_every_s
        restarts_left = 0 if self.layer is not None else self.settings.db_restarts
        next_restart = started + 4.0
        while not self.stop.wait(0.1):
            now = time.monotonic()
            if self._quiet.is_set() or self._calm.is_set():
                continue
            if now >= next_kill:
                self._kill_processor()
                next_kill = now + self.rng.uniform(0.5, 1.5) * self.settings.kill_every_s
            if now >= next_terminate:
                self._terminate_backends()
                next_terminate = now + self.rng.uniform(0.5, 1.5) * self.settings.terminate_every_s
            if restarts_left and now >= next_restart:
                self.pg.restart(self.settings.db_down_s)
                self.report.faults["db_restart"] += 1
                restarts_left -= 1
                next_restart = now + 8.0

    def _busy_processors(self) -> list[str]:
        """Processor workers holding leases right now (their owner is "<name>:<request id>")."""
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=1) as conn:
                owners = conn.execute(
                    "SELECT DISTINCT split_part(lease_owner, ':', 1) FROM webhook_events"
                    " WHERE status = 'processing' AND lease_expires_at > now()"
                ).fetchall()
        except psycopg.OperationalError:
            return []
        running = set(self.workers.running("processor"))
        return sorted(running & {owner for (owner,) in owners})

    def _kill_processor(self) -> None:
        running = self.workers.running("processor")
        if not running:
            return
        # Prefer a worker caught mid-batch: poll briefly for one that holds leases.
        deadline = time.monotonic() + 1.0
        busy = self._busy_processors()
        while not busy and time.monotonic() < deadline:
            time.sleep(0.02)
            busy = self._busy_processors()
        victim = self.rng.choice(busy or running)
        self.workers.kill(victim)
        self.killed.append(victim)
        self.report.faults["sigkill"] += 1
        self.workers.start("processor")
        # Mid-batch: the dead worker still holds leases (its owner is "<name>:<request id>").
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=1) as conn:
                held = conn.execute(
                    "SELECT count(*) FROM webhook_events"
                    " WHERE status = 'processing' AND lease_owner LIKE %s",
                    (f"{victim}:%",),
                ).fetchone()
        except psycopg.OperationalError:
            return
        if held and held[0]:
            self.report.kills_mid_batch += 1
            self.report.orphaned_leases += int(held[0])

    def _terminate_backends(self) -> None:
        try:
            with psycopg.connect(self.pg.admin_url, autocommit=True, connect_timeout=1) as admin:
                terminated = admin.execute(
                    """SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
                         FROM (SELECT pid FROM pg_stat_activity
                                WHERE datname = %s AND application_name LIKE 'webhook-inbox%%'
                                ORDER BY random() LIMIT %s) AS victims""",
                    (self.dbname, self.rng.randint(1, 3)),
                ).fetchone()
        except psycopg.OperationalError:
            return  # the database is restarting: that fault is already in progress
        self.report.faults["pg_terminate_backend"] += int(terminated[0]) if terminated else 0


# --- checks --------------------------------------------------------------------------------


def open_work(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    row = conn.execute(
        """SELECT (SELECT count(*) FROM webhook_events
                    WHERE status NOT IN ('processed', 'ignored', 'dead_letter')),
                  (SELECT count(*) FROM outbox_messages WHERE status = 'pending')"""
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def read_published(control_dir: Path) -> list[dict[str, Any]]:
    """Every message EventBridge accepted, as the sweepers' boto3 hooks recorded it."""
    found: list[dict[str, Any]] = []
    for log in sorted(control_dir.glob("published-*.jsonl")):
        for line in log.read_text().splitlines():
            if line.strip():
                found.append(json.loads(line))
    return found


def check_inbox(
    conn: psycopg.Connection[Any],
    planned: dict[tuple[str, str], PlannedEvent],
    acked: set[tuple[str, str]],
    report: SoakReport,
) -> set[tuple[str, str]]:
    """Every acknowledged event stored once and in its expected terminal status; returns the
    stored keys."""
    problems = report.violations
    stored: dict[tuple[str, str], tuple[str, int]] = {}
    for provider, event_id, status, attempts in conn.execute(
        "SELECT provider, event_id, status, attempts FROM webhook_events"
    ):
        if (provider, event_id) in stored:
            problems.append(f"stored twice: {provider}/{event_id}")
        stored[(provider, event_id)] = (status, attempts)
        if (provider, event_id) not in planned:
            problems.append(f"stored but never sent: {provider}/{event_id}")
    report.max_attempts = max((a for _, a in stored.values()), default=0)
    for key in acked:
        if key not in stored:
            report.lost += 1
            problems.append(f"acknowledged but not stored: {key}")
        elif stored[key][0] != planned[key].expected_status:
            problems.append(f"{key}: {stored[key][0]}, expected {planned[key].expected_status}")
    return set(stored)


def newest_versions(applied: list[PlannedEvent]) -> dict[tuple[str, str], PlannedEvent]:
    """The reference model for subscriptions: the newest version of each wins."""
    newest: dict[tuple[str, str], PlannedEvent] = {}
    for e in applied:
        best = newest.get((e.provider, e.key))
        if e.kind == "subscription" and (best is None or e.version > best.version):
            newest[(e.provider, e.key)] = e
    return newest


def check_subscriptions(
    conn: psycopg.Connection[Any], newest: dict[tuple[str, str], PlannedEvent], report: SoakReport
) -> None:
    stored = {
        (p, s): (status, customer, version, source)
        for p, s, status, customer, version, source in conn.execute(
            "SELECT provider, subscription_id, status, customer_id, provider_version,"
            " source_event_id FROM subscriptions"
        )
    }
    if set(stored) != set(newest):
        report.violations.append(f"subscriptions: {len(stored)} stored, {len(newest)} expected")
    for key, e in newest.items():
        base = 1_700_000_000 if e.provider == "stripe" else 0
        want = (e.status, e.customer_id, base + e.version, e.event_id)
        if stored.get(key) != want:
            report.violations.append(f"subscription {key}: {stored.get(key)} != model {want}")


def check_customers(
    conn: psycopg.Connection[Any], applied: list[PlannedEvent], report: SoakReport
) -> dict[tuple[str, str], str | None]:
    """Create/delete with tombstones: deleted wins whatever the order; returns created_event_id."""
    deleted = {(e.provider, e.key): e for e in applied if e.kind == "customer_deleted"}
    created = {(e.provider, e.key): e for e in applied if e.kind == "customer_created"}
    stored = {
        (p, c): (status, created_id, deleted_id)
        for p, c, status, created_id, deleted_id in conn.execute(
            "SELECT provider, customer_id, status, created_event_id, deleted_event_id"
            " FROM customers"
        )
    }
    if set(stored) != set(deleted) | set(created):
        report.violations.append("customers differ from the model's set")
    for key, (status, created_id, deleted_id) in stored.items():
        if key in deleted:
            ok = (status, deleted_id) == ("deleted", deleted[key].event_id)
        else:
            ok = status == "active" and key in created and created_id == created[key].event_id
        if created_id is not None and (key not in created or created_id != created[key].event_id):
            ok = False
        if not ok:
            report.violations.append(f"customer {key}: {status} {created_id} {deleted_id}")
    return {key: created_id for key, (_, created_id, _) in stored.items()}


def check_version_sequences(
    versions: dict[tuple[str, str], list[int]],
    newest: dict[tuple[str, str], PlannedEvent],
    report: SoakReport,
) -> None:
    """Each applied update must be newer than the one applied before it (a repeat or a step
    back is a double or stale apply), and the last one applied is the newest."""
    for key, seen in versions.items():
        if any(b <= a for a, b in itertools.pairwise(seen)):
            report.double_applied += 1
            report.violations.append(f"subscription {key} applied versions {seen}")
        if seen[-1] != newest[key].version:
            report.violations.append(f"subscription {key}: last published version {seen[-1]}")


def check_outbox(
    conn: psycopg.Connection[Any],
    planned: dict[tuple[str, str], PlannedEvent],
    newest: dict[tuple[str, str], PlannedEvent],
    customer_created: dict[tuple[str, str], str | None],
    report: SoakReport,
) -> dict[str, str]:
    """One message per applied transition, in an order only a single application allows;
    returns deduplication key → topic."""
    problems = report.violations
    versions: dict[tuple[str, str], list[int]] = defaultdict(list)
    transitions: Counter[tuple[str, str, str]] = Counter()
    keys: dict[str, str] = {}
    for topic, dedup_key, payload, status, provider, event_id in conn.execute(
        """SELECT m.topic, m.deduplication_key, m.payload, m.status, e.provider, e.event_id
             FROM outbox_messages m JOIN webhook_events e ON e.id = m.source_event_id
            ORDER BY m.id"""
    ):
        keys[dedup_key] = topic
        if dedup_key != f"{provider}:{event_id}:{topic}":
            problems.append(f"outbox key {dedup_key} does not derive from its source event")
        if status != "published":
            problems.append(f"outbox {dedup_key} is {status}")
        source = planned[(provider, event_id)]
        if topic == "subscription.updated":
            versions[(provider, source.key)].append(source.version)
            continue
        if topic == "customer.deleted":
            created_before = transitions[(provider, source.key, "customer.created")] > 0
            if payload["before_created"] == created_before:
                problems.append(f"customer {source.key}: before_created disagrees with history")
        transitions[(provider, source.key, topic)] += 1
    check_version_sequences(versions, newest, report)
    for (provider, customer, topic), count in transitions.items():
        if count > 1:
            report.double_applied += 1
            problems.append(f"customer {provider}/{customer}: {count} x {topic}")
    for (provider, customer), created_id in customer_created.items():
        if (created_id is not None) != (transitions[(provider, customer, "customer.created")] == 1):
            problems.append(f"customer {customer}: created_event_id and outbox disagree")
    return keys


def check_database(
    conn: psycopg.Connection[Any],
    events: list[PlannedEvent],
    acked: set[tuple[str, str]],
    report: SoakReport,
) -> dict[str, str]:
    """Inbox, domain and outbox against the reference model; returns dedup key → topic."""
    planned = {(e.provider, e.event_id): e for e in events}
    stored = check_inbox(conn, planned, acked, report)
    # The model applies every stored event of a handled kind (poison ones dead-letter untouched).
    applied = [e for e in events if (e.provider, e.event_id) in stored and e.kind != "poison"]
    newest = newest_versions(applied)
    check_subscriptions(conn, newest, report)
    customer_created = check_customers(conn, applied, report)
    return check_outbox(conn, planned, newest, customer_created, report)


def check_published(
    published: list[dict[str, Any]], outbox_keys: dict[str, str], report: SoakReport
) -> None:
    counts = Counter(p["deduplication_key"] for p in published)
    report.published = len(published)
    report.republished = sum(c - 1 for c in counts.values())
    missing = set(outbox_keys) - set(counts)
    if missing:
        report.violations.append(f"{len(missing)} outbox messages never published")
    strangers = set(counts) - set(outbox_keys)
    if strangers:
        report.violations.append(f"{len(strangers)} published keys with no outbox row")
    effects: dict[tuple[Any, ...], set[str]] = defaultdict(set)
    for p in published:
        payload = p.get("payload") or {}
        effects[(payload.get("provider"), payload.get("source_event_id"), p.get("topic"))].add(
            p["deduplication_key"]
        )
    for effect, keys in effects.items():
        if len(keys) > 1:
            report.double_applied += 1
            report.violations.append(f"effect {effect} published under keys {sorted(keys)}")


def scan_logs(control_dir: Path, report: SoakReport) -> None:
    """No worker log line may carry a secret, the database password or payload text."""
    needles = (*SECRETS, PAYLOAD_MARKER)
    for log in sorted(control_dir.glob("*.log")):
        text = log.read_text(errors="replace")
        report.leaks.extend(f"{log.name}: {n[:12]}…" for n in needles if n in text)


# --- the run -------------------------------------------------------------------------------


def run_soak(settings: SoakSettings, pg: DedicatedPostgres, control_dir: Path) -> SoakReport:
    started = time.monotonic()
    rng = random.Random(settings.seed)
    report = SoakReport(settings)
    events = plan_events(settings.events, rng)
    deliveries = plan_deliveries(events, settings, rng)
    report.duplicates = len(deliveries) - len(events)
    report.concurrent_duplicates = sum(d.copies - 1 for d in deliveries)
    report.duplicates += report.concurrent_duplicates

    dbname = f"soak_{settings.seed}_{settings.events}"
    url = pg.create_migrated_database(dbname)
    moto = MotoServer()
    workers: Workers | None = None
    layer = FaultLayer.start(settings, url, moto.port) if settings.fault_layer else None
    try:
        sqs = moto.client("sqs")
        queue_url = sqs.create_queue(QueueName="processing", Attributes={"VisibilityTimeout": "8"})[
            "QueueUrl"
        ]
        moto.client("events").create_event_bus(Name="soak-bus")

        (control_dir / "faults.on").touch()
        # The workers' way to PostgreSQL and moto; the soak's own checks connect directly.
        env = worker_environment(
            DATABASE_URL=via_proxy(url, layer.pg) if layer else url,
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{layer.moto.port}" if layer else moto.endpoint,
            AWS_DEFAULT_REGION="us-east-1",
            PROCESSING_QUEUE_URL=queue_url,
            PROVIDERS_CONFIG=json.dumps(SOAK_PROVIDERS),
            OUTBOX_DESTINATION="eventbridge",
            OUTBOX_EVENT_BUS_NAME="soak-bus",
            OUTBOX_MAX_ATTEMPTS="30",
            MAX_ATTEMPTS="12",
            RETRY_BASE_SECONDS="0.2",
            RETRY_MAX_SECONDS="2",
            DB_CONNECT_TIMEOUT_S="1",
            DB_STATEMENT_TIMEOUT_MS="3000",
            DB_LOCK_TIMEOUT_MS="1000",
            POWERTOOLS_LOG_LEVEL="INFO",
            POWERTOOLS_METRICS_NAMESPACE="WebhookInboxSoak",
            SOAK_CONTROL_DIR=str(control_dir),
            SOAK_SQS_FAULT_RATE=str(settings.sqs_fault_rate),
            SOAK_PUBLISH_FAULT_RATE=str(settings.publish_fault_rate),
            SOAK_SWEEP_INTERVAL_S="1",
            SOAK_LOST_SEND_RATE=str(settings.lost_send_rate),
        )
        ingest_env = {"DATABASE_URL": via_proxy(url, layer.ingest_pg)} if layer else {}
        workers = Workers(control_dir, env, ingest_env)
        for _ in range(settings.ingest_workers):
            workers.start_ingest()
        for _ in range(settings.processor_workers):
            workers.start("processor")
        for _ in range(settings.sweepers):
            workers.start("sweeper")
        wait_for_ingest(workers.ingest_ports)

        plan_s = plan_seconds(settings) if layer else 0.0
        sender = Sender(
            deliveries, workers.ingest_ports, report, spread_over_s=plan_s + settings.steady_tail_s
        )
        chaos = Chaos(
            settings=settings,
            pg=pg,
            dbname=dbname,
            url=url,
            workers=workers,
            report=report,
            rng=rng,
            layer=layer,
            sender=sender,
            queue=(sqs, queue_url),
        )
        chaos.start()
        try:
            sender.run(
                settings.sender_threads,
                timeout_s=60 + plan_s + settings.steady_tail_s + settings.events / 10,
            )
            chaos.wait_for_plan(plan_s + 30)
        finally:
            chaos.finish()
        report.acked = len(sender.acked)
        if layer:
            count_after_idle(chaos.after_idle_windows, sender, control_dir, report)
            report.faults.update(pg_idle_closed=layer.pg_idle_closed)
            report.faults.update(moto_idle_closed=layer.moto.idle_closed)

        drain_started = time.monotonic()
        with psycopg.connect(url, autocommit=True) as conn:
            deadline = time.monotonic() + settings.drain_timeout_s
            while open_work(conn) != (0, 0) and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(3)  # a few more sweeps over the settled state
            report.drain_seconds = time.monotonic() - drain_started
            workers.stop_all()
            outbox_keys = check_database(conn, events, sender.acked, report)
            report.terminal = soak_terminal.measure(
                conn,
                control_dir,
                windows=chaos.windows,
                purged=chaos.purged,
                answers=sender.answers,
                cleared_at=chaos.cleared_at or time.time(),
            )
            open_events, pending = open_work(conn)
            if open_events or pending:
                breakdown = conn.execute(
                    "SELECT status, enqueued_at IS NULL, count(*) FROM webhook_events"
                    " GROUP BY 1, 2 ORDER BY 1, 2"
                ).fetchall()
                report.violations.insert(
                    0, f"not settled: {open_events} events, {pending} outbox; {breakdown}"
                )
        check_published(read_published(control_dir), outbox_keys, report)
        report.violations.extend(workers.unexpected_exits())
        for log in control_dir.glob("faults-*.log"):
            report.faults.update(log.read_text().split())
        scan_logs(control_dir, report)
    finally:
        if workers is not None:
            workers.stop_all()
        if layer is not None:
            layer.stop()
        moto.close()
    report.seconds = time.monotonic() - started
    return report


def count_after_idle(
    windows: list[tuple[float, float]], sender: Sender, control_dir: Path, report: SoakReport
) -> None:
    """Answers and failures in the windows after the quiet periods: ingest's non-2xx answers
    (the sender's) and the processors' batches handed back for a database failure."""

    def inside(moment: float) -> bool:
        return any(start <= moment <= end for start, end in windows)

    handed_back = [
        float(stamp)
        for log in control_dir.glob("events-*.log")
        for kind, stamp in (line.split() for line in log.read_text().splitlines() if line)
        if kind == "batch_handed_back"
    ]
    report.after_idle_answers = sum(map(inside, sender.answered_at))
    report.idle_failures = sum(map(inside, sender.failed_at)) + sum(map(inside, handed_back))
