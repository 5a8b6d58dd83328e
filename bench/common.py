"""What every benchmark shares: a throwaway database, machine facts, a round-trip counter built on
libpq's protocol trace, quiet Powertools output, and the writer of ``docs/benchmarks.md``.

Benchmarks compare ratios measured in the same run on the same machine; absolute figures depend
on the disk's flush latency and on whatever else the machine is doing.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_METRICS_NAMESPACE": "WebhookInboxBench",
    "POWERTOOLS_SERVICE_NAME": "webhook-inbox-bench",
}.items():
    os.environ.setdefault(_name, _value)

import psycopg  # noqa: E402
from psycopg import pq  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from tests.support import PostgresServer, unique_db_name  # noqa: E402

Conn = psycopg.Connection[Any]
DOCS = ROOT / "docs"
RESULTS = DOCS / "benchmarks.md"
CHARTS = DOCS / "benchmarks"


# --- the database ---------------------------------------------------------------------------


@contextlib.contextmanager
def bench_database(server: PostgresServer | None = None) -> Iterator[str]:
    """A freshly migrated database ($DATABASE_URL's server, else a throwaway pgserver)."""
    from webhook_inbox.store.migrate import migrate

    own = server is None
    server = server or PostgresServer()
    name = unique_db_name("wi_bench")
    try:
        url = server.create_database(name)
        with psycopg.connect(url) as conn:
            migrate(conn)
            migrate(conn, package="webhook_inbox_app")  # the example handlers' tables
        with environment(DATABASE_URL=url):
            yield url
    finally:
        server.drop_database(name)
        if own:
            server.stop()


@contextlib.contextmanager
def database_behind_latency(url: str, rtt_ms: float) -> Iterator[str]:
    """``url``'s database reached over loopback TCP through ``tests/faults/proxy.py`` adding
    ``rtt_ms`` per round trip (half each way); ``url`` itself when ``rtt_ms`` is 0.

    The proxy runs in a process of its own: in ours its event loop would compete for the GIL
    with the code being measured, charging the network's delay to whichever side uses more CPU.
    """
    if rtt_ms <= 0:
        yield url
        return
    from tests.faults.proxy import pg_upstream

    script = (
        "import sys, threading; sys.path.insert(0, sys.argv[1])\n"
        "from tests.faults.proxy import FaultProxy\n"
        "upstream = sys.argv[2] if sys.argv[2].startswith('/') else"
        " (sys.argv[2].rsplit(':', 1)[0], int(sys.argv[2].rsplit(':', 1)[1]))\n"
        "proxy = FaultProxy(upstream).start()\n"
        "half = float(sys.argv[3]) / 2\n"
        "proxy.latency(half, half)\n"
        "print(proxy.port, flush=True)\n"
        "sys.stdin.read()  # until the benchmark closes our stdin\n"
    )
    upstream = pg_upstream(url)
    where = upstream if isinstance(upstream, str) else f"{upstream[0]}:{upstream[1]}"
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(ROOT), where, str(rtt_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        params = conninfo_to_dict(url)
        # SSL and GSS off: each refusal would be one more round trip through the delay.
        params.update(host="127.0.0.1", port=str(port), sslmode="disable", gssencmode="disable")
        with environment(DATABASE_URL=make_conninfo(**params)):
            yield make_conninfo(**params)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set environment variables for the block (the data layer reads DATABASE_URL)."""
    from webhook_inbox.store import db

    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    db.reset_for_tests()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        db.reset_for_tests()


def reset_tables(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "TRUNCATE webhook_events, outbox_messages, customers, subscriptions"
            " RESTART IDENTITY CASCADE"
        )
        conn.execute("VACUUM ANALYZE webhook_events, outbox_messages, customers")


def machine_details(url: str) -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with psycopg.connect(url) as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN"
                " ('server_version', 'fsync', 'synchronous_commit', 'wal_sync_method')"
            ).fetchall()
        )
        transport = "Unix socket" if conn.info.host.startswith("/") else f"TCP {conn.info.host}"
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "load": f"{os.getloadavg()[0]:.1f}",
        "postgres": (
            f"{settings.get('server_version')} over a {transport} (fsync={settings.get('fsync')},"
            f" synchronous_commit={settings.get('synchronous_commit')},"
            f" wal_sync_method={settings.get('wal_sync_method')})"
        ),
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
    }


def machine_line(details: dict[str, str]) -> str:
    return (
        f"{details['date']} · {details['nproc']} CPUs ({details['cpu']}), load average"
        f" {details['load']} at the end · PostgreSQL {details['postgres']} · Python"
        f" {details['python']}, psycopg {details['psycopg']}"
    )


# --- counting round trips -------------------------------------------------------------------


@dataclass(frozen=True)
class WireCount:
    """What one piece of work cost on the wire.

    A round trip is one wait for the server: psycopg sends one or more messages (a statement's
    Parse, Bind, Execute and Sync, or in pipeline mode several statements ended by a Sync or a
    Flush) and blocks until the server answers. In the trace that is a run of frontend (``F``)
    lines followed by backend (``B``) lines, so round trips are counted as F→B turns; outside
    pipeline mode that equals the number of ReadyForQuery messages. A commit is a ReadyForQuery
    that leaves the session idle (an explicit COMMIT, or an autocommit statement); an explicit
    ROLLBACK is not counted as one.
    """

    round_trips: int
    commits: int
    statements: list[str]

    def __truediv__(self, n: int) -> tuple[float, float]:
        return self.round_trips / n, self.commits / n


_STATEMENT = re.compile(r'^F\t\d+\t(?:Query|Parse)\t (?:"[^"]*" )?"(.*)$')


def _first_keyword(text: str) -> str | None:
    """The statement's first SQL keyword, skipping comment lines; None if all is comment."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            return re.split(r'[\s"]', stripped, maxsplit=1)[0].upper()
    return None


@contextlib.contextmanager
def count_wire(conn: Conn) -> Iterator[list[WireCount]]:
    """Trace ``conn``'s protocol messages for the block; yields a list that gets the count."""
    box: list[WireCount] = []
    with tempfile.TemporaryFile() as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield box
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        lines = trace.read().decode("utf-8", "replace").splitlines()
    round_trips = commits = 0
    statements: list[str] = []
    pending = False  # a statement whose first lines were comments: keep reading its text
    last_direction = ""
    for line in lines:
        direction = line[:2]
        if direction == "B\t" and last_direction == "F\t":
            round_trips += 1
        if direction in {"F\t", "B\t"}:
            last_direction = direction
        match = _STATEMENT.match(line)
        if match or (pending and not line.startswith(("F\t", "B\t"))):
            keyword = _first_keyword(match.group(1) if match else line)
            pending = keyword is None
            if keyword:
                statements.append(keyword)
            continue
        pending = False
        idle = "\tReadyForQuery\t" in line and line.rstrip().endswith("I")
        if idle and (not statements or statements[-1] != "ROLLBACK"):
            commits += 1
    box.append(WireCount(round_trips, commits, statements))


def statement_mix(statements: list[str], per: int = 1) -> str:
    """``BEGIN x2, UPDATE x11, …`` in order of first appearance, divided by ``per``."""
    counts: dict[str, int] = {}
    for keyword in statements:
        counts[keyword] = counts.get(keyword, 0) + 1
    return ", ".join(f"{k} x{v / per:g}" for k, v in counts.items())


# --- threads, timing, output -----------------------------------------------------------------


class PerThreadConnections:
    """``db.get_connection`` replacement giving each thread its own connection, as separate
    Lambda execution environments would have (the real one is process-wide by design)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self.opened: list[Conn] = []

    def __call__(self, application_name: str = "webhook-inbox") -> Conn:
        from webhook_inbox.store import credentials, db

        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conninfo = credentials.database_conninfo(db.settings())
            conn = db.connect(conninfo, application_name=application_name)
            self._local.conn = conn
            with self._lock:
                self.opened.append(conn)
        return conn

    def close_all(self) -> None:
        for conn in self.opened:
            conn.close()
        self.opened.clear()


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def quiet_output() -> Iterator[None]:
    """Send stdout (Powertools logs and EMF metrics) to /dev/null: written, as in Lambda, but not
    shown. The writes stay in the measured path; only the terminal is spared."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


def silence_logger(logger: Any) -> None:
    """A Powertools Logger keeps the stream it was built with; point it at /dev/null."""
    logger.registered_handler.setStream(open(os.devnull, "w"))  # noqa: SIM115 - process-long


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


def timed(work: Callable[[], None]) -> float:
    import time

    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---" if i == 0 else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


_HEAD = """# Benchmarks

Each section is rewritten by its script ("How to run them"). Every figure is a
ratio against a baseline measured in the same run on the same machine: the absolute numbers
depend on the disk's flush latency and on the machine's other load (the machine below has two
cores shared with other work), the ratios much less.
"""


def write_section(key: str, markdown: str) -> Path:
    """Replace (or append) the section ``key`` of docs/benchmarks.md."""
    DOCS.mkdir(exist_ok=True)
    text = RESULTS.read_text() if RESULTS.exists() else _HEAD
    begin, end = f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->"
    block = f"{begin}\n{markdown.strip()}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(text)
    return RESULTS


def chart_path(key: str) -> Path:
    CHARTS.mkdir(parents=True, exist_ok=True)
    return CHARTS / f"{key}.png"


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("matplotlib is missing: pip install -e '.[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
