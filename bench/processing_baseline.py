"""Another source tree's processor, measured beside this one's by ``bench.processing_throughput
--baseline TREE`` (make the tree with ``git worktree add --detach /tmp/wi-old <commit>``).

The other tree runs in a child process of its own — its interpreter (``TREE/.venv/bin/python``
when it has one, so its own pinned libraries), its runtime, its example handlers, its schema in
a database of its own on the same server — and processes batches when told to, between this
tree's variants in the same rounds: the machine's drift and other load hit both alike. It drives
its processor with its own benchmark module's ``setup()``, ``store_batches`` and
``check_processed``, which every release since the processing benchmark exists has had.

The child answers one JSON line per request on a copy of its stdout taken before anything is
imported; its processor's logs and metrics go to /dev/null as in this tree's variants.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

from bench.common import WireCount
from bench.cpu import Sample

# Runs in the other tree (working directory = the tree), so it uses only that tree's modules.
_CHILD = r"""
import json, os, sys, time
from pathlib import Path

answers = os.fdopen(os.dup(1), "w", buffering=1)
tree = Path.cwd()
sys.path[:0] = [str(tree), *(str(tree / d) for d in ("layers/shared", "application", "tools"))]

from bench import processing_throughput as bench
from bench.common import bench_database, count_wire, quiet_output, reset_tables


def cpu_ns(pid):
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


with bench_database() as url:
    variants = bench.setup()
    conn = variants.conn
    answers.write("ready\n")
    work, expected = iter(()), 0
    for line in sys.stdin:
        what, count = line.split()
        if what in ("store", "wire"):
            if expected:  # every batch stored before went through
                bench.check_processed(conn, expected)
                conn.commit()
            reset_tables(url)
            work = iter(bench.store_batches(conn, int(count), bench.EVENT_TYPE))
            conn.commit()
            expected = int(count) * bench.BATCH
        with quiet_output():
            if what == "wire":
                with count_wire(conn) as box:
                    for ids in work:
                        variants.processor(conn, ids)
                answer = {"round_trips": box[0].round_trips, "commits": box[0].commits}
            elif what == "run":
                ids = next(work)
                pid = conn.info.backend_pid
                server, cpu, wall = cpu_ns(pid), time.process_time(), time.perf_counter()
                variants.processor(conn, ids)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                after = cpu_ns(pid) if conn.info.backend_pid == pid else None
                server = None if server is None or after is None else (after - server) / 1e9
                answer = {"wall_s": wall, "client_cpu_s": cpu, "server_cpu_s": server}
            else:
                answer = {}
        answers.write(json.dumps(answer) + "\n")
    if expected:
        bench.check_processed(conn, expected)
"""


class BaselineProcessor:
    """The other tree's processor in its child process; :meth:`close` ends the child."""

    def __init__(self, tree: Path, label: str) -> None:
        self.label = label
        own = tree / ".venv" / "bin" / "python"
        python = str(own) if own.exists() else sys.executable
        # $DATABASE_URL (bench_database's) tells the child's own bench_database which server.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self._child = subprocess.Popen(
            [python, "-c", _CHILD],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self._answer() != "ready":
            raise RuntimeError(f"the baseline in {tree} did not start")

    def _answer(self) -> str:
        out: IO[str] | None = self._child.stdout
        line = out.readline().strip() if out is not None else ""
        if not line:
            raise RuntimeError(f"the baseline child ended (exit {self._child.wait()})")
        return line

    def _ask(self, what: str, batches: int) -> dict[str, float | None]:
        if self._child.stdin is None:
            raise RuntimeError("the baseline child has no input")
        self._child.stdin.write(f"{what} {batches}\n")
        self._child.stdin.flush()
        answer: dict[str, float | None] = json.loads(self._answer())
        return answer

    def store(self, batches: int) -> None:
        """Store ``batches`` fresh batches of 10 (on an emptied inbox) for :meth:`run_next`."""
        self._ask("store", batches)

    def run_next(self) -> Sample:
        """Process the next stored batch; what it cost."""
        got = self._ask("run", 1)
        wall, cpu, server = got["wall_s"], got["client_cpu_s"], got["server_cpu_s"]
        return Sample(wall or 0.0, cpu or 0.0, server, 10)

    def wire(self, batches: int) -> WireCount:
        got = self._ask("wire", batches)
        return WireCount(int(got["round_trips"] or 0), int(got["commits"] or 0), [])

    def close(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait(timeout=60)
