"""Stop the throwaway PostgreSQL and remove its folder if `webhook-inbox dev` dies without doing so.

The embedded server runs as its own daemon, outside the dev command's process tree, so nothing
stops it when the dev command is SIGKILLed (or crashes past its ``finally``). This small process
holds the read end of a pipe whose only write end is the parent's: the kernel closes that end
when the parent dies, however it dies, and the reaper then shuts the server down. A clean stop
tells it to exit instead. It ignores the signals a terminal or a supervisor sends to the whole
group, so it outlives the parent long enough to clean up.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from multiprocessing.connection import Connection
from pathlib import Path

RELEASE = "release"
SHUTDOWN_WAIT_S = 10.0


def reaper_main(parent: Connection, pg_dir: str) -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    try:
        if parent.recv() == RELEASE:
            return  # the parent stopped the server itself
    except (EOFError, OSError):
        pass  # the parent is gone
    stop_postgres(Path(pg_dir))
    shutil.rmtree(pg_dir, ignore_errors=True)


def _postmaster_pid(pg_dir: Path) -> int | None:
    try:
        first_line = (pg_dir / "postmaster.pid").read_text().splitlines()[0]
        return int(first_line)
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_postgres(pg_dir: Path) -> None:
    """Fast shutdown (SIGINT to the postmaster), then SIGKILL if it has not exited in time."""
    pid = _postmaster_pid(pg_dir)
    if pid is None or not _alive(pid):
        return
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + SHUTDOWN_WAIT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
