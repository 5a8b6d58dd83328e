"""CPU per event, on both sides of the connection: the client process's CPU time
(``time.process_time``: every thread of this process, the processor's Python, psycopg and libpq
included) and the CPU time of the server process behind the connection (``/proc/<pid>/schedstat``,
so only for a server on this machine). Wall time, on a shared machine, also counts whatever else
ran; CPU time counts the work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.common import Conn
from bench.server_counters import cpu_ns


@dataclass(frozen=True)
class Sample:
    """One measured run of ``events`` events."""

    wall_s: float
    client_cpu_s: float
    server_cpu_s: float | None  # None: the server is not on this machine, or the backend changed
    events: int

    @property
    def rate(self) -> float:
        return self.events / self.wall_s

    @property
    def client_ms(self) -> float:
        """Client CPU milliseconds per event."""
        return self.client_cpu_s / self.events * 1000

    @property
    def server_ms(self) -> float | None:
        return None if self.server_cpu_s is None else self.server_cpu_s / self.events * 1000


def sampled(conn: Conn, events: int, work: Callable[[], None]) -> Sample:
    """Run ``work`` (``events`` events over ``conn``) and say what it cost."""
    pid = conn.info.backend_pid
    server = cpu_ns(pid)
    cpu = time.process_time()
    wall = time.perf_counter()
    work()
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    after = cpu_ns(pid) if conn.info.backend_pid == pid else None
    used = None if server is None or after is None else (after - server) / 1e9
    return Sample(wall, cpu, used, events)


def total(samples: list[Sample]) -> Sample:
    """Several samples as one (the server's CPU unknown if it is unknown for any)."""
    servers = [s.server_cpu_s for s in samples]
    return Sample(
        sum(s.wall_s for s in samples),
        sum(s.client_cpu_s for s in samples),
        None if None in servers else sum(x for x in servers if x is not None),
        sum(s.events for s in samples),
    )
