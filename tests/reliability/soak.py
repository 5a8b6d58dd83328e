"""The chaos soak: providers sending through real ingest processes while faults are injected.

``run_soak`` plans N events (out-of-order subscription versions, creates and deletes racing,
unhandled and poison events), delivers them with ≥ 30 % duplicate redeliveries in shuffled
order from concurrent sender threads that retry every non-2xx answer on a compressed Svix
schedule, and meanwhile SIGKILLs processor workers, terminates database backends, restarts the
database and lets the workers' SQS sends and outbox publishes fail. Then it stops the faults,
lets the sweepers run, and checks with SQL that nothing was lost or applied twice.
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
SUBSCRIPTION_STATUSES = ("trialing", "active", "past_due", "canceled", "unpaid")
TERMINAL = ("processed", "ignored", "dead_letter")


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

    def __init__(self, control_dir: Path, env: dict[str, str]) -> None:
        self.control_dir = control_dir
        self.env = env
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ingest_ports: list[int] = []
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

    def start_ingest(self) -> None:
        port = free_port()
        self.start("ingest", SOAK_PORT=str(port))
        self.ingest_ports.append(port)

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

    def __init__(self, deliveries: list[Delivery], ports: list[int], report: SoakReport) -> None:
        from webhook_inbox.providers import load_config_text

        self.registry = load_config_text(json.dumps(SOAK_PROVIDERS))
        self.ports = ports
        self.report = report
        self.acked: set[tuple[str, str]] = set()
        self._queue: list[tuple[float, int, Delivery]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._outstanding = len(deliveries)
        self._done = threading.Event()
        now = time.monotonic()
        for delivery in deliveries:
            self._push(now, delivery)

    def _push(self, due: float, delivery: Delivery) -> None:
        heapq.heappush(self._queue, (due, next(self._seq), delivery))

    def _post(self, event: PlannedEvent) -> int:
        from webhook_inbox.providers import sign_delivery

        headers = sign_delivery(
            self.registry[event.provider],
            event.body,
            event_id=event.event_id if event.provider == "example" else None,
        ).headers
        port = random.choice(self.ports)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request(
                "POST", f"/webhooks/{event.provider}", body=event.body, headers=headers
            )
            response = connection.getresponse()
            response.read()
            return response.status
        except OSError:
            return 0  # connection refused / reset / timed out: the provider retries
        finally:
            connection.close()

    def _send(self, delivery: Delivery) -> None:
        if delivery.copies > 1:
            results: list[int] = []
            threads = [
                threading.Thread(target=lambda: results.append(self._post(delivery.event)))
                for _ in range(delivery.copies)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            results = [self._post(delivery.event)]
        with self._lock:
            self.report.deliveries += len(results)
            self.report.statuses.update(results)
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
                if item is not None and item[0] <= time.monotonic():
                    heapq.heappop(self._queue)
                else:
                    item = None
            if item is None:
                time.sleep(0.01)
                continue
            self._send(item[2])

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


class Chaos:
    """Faults on a timer while the sender runs: SIGKILL a processor worker (and start a new
    one, as Lambda would), terminate random backends, restart the database."""

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
    ) -> None:
        self.settings = settings
        self.pg = pg
        self.dbname = dbname
        self.url = url
        self.workers = workers
        self.report = report
        self.rng = rng
        self.stop = threading.Event()
        self.killed: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self) -> None:
        self.stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        started = time.monotonic()
        next_kill = started + self.settings.kill_every_s
        next_terminate = started + self.settings.terminate_every_s
        restarts_left = self.settings.db_restarts
        next_restart = started + 4.0
        while not self.stop.wait(0.1):
            now = time.monotonic()
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
    try:
        sqs = moto.client("sqs")
        queue_url = sqs.create_queue(QueueName="processing", Attributes={"VisibilityTimeout": "8"})[
            "QueueUrl"
        ]
        moto.client("events").create_event_bus(Name="soak-bus")

        (control_dir / "faults.on").touch()
        env = worker_environment(
            DATABASE_URL=url,
            AWS_ENDPOINT_URL=moto.endpoint,
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
        )
        workers = Workers(control_dir, env)
        for _ in range(settings.ingest_workers):
            workers.start_ingest()
        for _ in range(settings.processor_workers):
            workers.start("processor")
        for _ in range(settings.sweepers):
            workers.start("sweeper")
        wait_for_ingest(workers.ingest_ports)

        chaos = Chaos(
            settings=settings,
            pg=pg,
            dbname=dbname,
            url=url,
            workers=workers,
            report=report,
            rng=rng,
        )
        sender = Sender(deliveries, workers.ingest_ports, report)
        chaos.start()
        try:
            sender.run(settings.sender_threads, timeout_s=60 + settings.events / 10)
        finally:
            chaos.finish()
            (control_dir / "faults.on").unlink()
        report.acked = len(sender.acked)

        drain_started = time.monotonic()
        with psycopg.connect(url, autocommit=True) as conn:
            deadline = time.monotonic() + settings.drain_timeout_s
            while open_work(conn) != (0, 0) and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(3)  # a few more sweeps over the settled state
            report.drain_seconds = time.monotonic() - drain_started
            workers.stop_all()
            outbox_keys = check_database(conn, events, sender.acked, report)
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
        moto.close()
    report.seconds = time.monotonic() - started
    return report
