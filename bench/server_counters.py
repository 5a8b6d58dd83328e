"""What a unit of work costs the database server, read from its own counters: the CPU time of
the process that ran it and of all server processes together (``/proc/<pid>/schedstat``, so
only for a server on this machine), and the WAL it wrote (``pg_stat_get_backend_wal``, records,
full-page images and bytes; PostgreSQL 18). Used by ``bench.capacity_inputs``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from bench.common import Conn, WireCount, count_wire


def cpu_ns(pid: int) -> int | None:
    """Nanoseconds process ``pid`` has run on a CPU (None: not a process of this machine)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Counters:
    at: float
    backend_cpu_ns: int | None
    server_cpu_ns: int | None
    wal_records: int
    wal_fpi: int
    wal_bytes: int
    wal_fsyncs: int  # every process's, from pg_stat_io (as far as each has reported them)


def read_counters(measured: Conn, observer: Conn) -> Counters:
    """The counters as of now. ``measured`` flushes its pending statistics first (at the end
    of this statement's transaction), so the observer reads them up to date."""
    for conn in (measured, observer):
        conn.execute("SELECT pg_stat_force_next_flush()")
        if not conn.autocommit:  # the flush happens once the session is idle again
            conn.commit()
    pid = measured.info.backend_pid
    wal = observer.execute(
        "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_get_backend_wal(%s)", (pid,)
    ).fetchone()
    row = observer.execute(
        "SELECT (SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal'),"
        " array(SELECT pid FROM pg_stat_activity)"
    ).fetchone()
    assert wal is not None
    assert row is not None
    fsyncs, pids = row
    per_process = [cpu_ns(p) for p in pids]
    server = None if None in per_process else sum(n for n in per_process if n is not None)
    return Counters(
        time.perf_counter(),
        cpu_ns(pid),
        server,
        int(wal[0]),
        int(wal[1]),
        int(Decimal(wal[2])),
        int(fsyncs),
    )


@dataclass
class Unit:
    """What ``units`` units of one kind of work cost, and the per-unit figures."""

    name: str
    units: int
    wall_s: float = 0.0
    backend_cpu_s: float | None = None
    server_cpu_s: float | None = None
    wal_records: int = 0
    wal_fpi: int = 0
    wal_bytes: int = 0
    wal_fsyncs: int = 0
    wire: WireCount | None = None
    wire_units: int = 1
    wall_at_rtt_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def per(self, value: float | None, scale: float = 1.0) -> float | None:
        return None if value is None else value / self.units * scale


def difference(name: str, units: int, before: Counters, after: Counters) -> Unit:
    def cpu(a: int | None, b: int | None) -> float | None:
        return None if a is None or b is None else (b - a) / 1e9

    return Unit(
        name,
        units,
        wall_s=after.at - before.at,
        backend_cpu_s=cpu(before.backend_cpu_ns, after.backend_cpu_ns),
        server_cpu_s=cpu(before.server_cpu_ns, after.server_cpu_ns),
        wal_records=after.wal_records - before.wal_records,
        wal_fpi=after.wal_fpi - before.wal_fpi,
        wal_bytes=after.wal_bytes - before.wal_bytes,
        wal_fsyncs=after.wal_fsyncs - before.wal_fsyncs,
    )


def measured(
    name: str, conn: Conn, observer: Conn, work: list[Callable[[], None]], wire_sample: int
) -> Unit:
    """Run ``work`` between two readings; the first ``wire_sample`` items also under libpq's
    trace (not timed: tracing costs the client time)."""
    with count_wire(conn) as box:
        for item in work[:wire_sample]:
            item()
    before = read_counters(conn, observer)
    for item in work[wire_sample:]:
        item()
    after = read_counters(conn, observer)
    unit = difference(name, len(work) - wire_sample, before, after)
    unit.wire, unit.wire_units = box[0], wire_sample
    return unit
