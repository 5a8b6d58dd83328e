"""A bound on how long database work may wait for an answer, kept on our side of the network.

A database that accepts and never answers (RDS Proxy holding a statement through a failover, a
path whose far end is gone while something in between still acknowledges) is bounded by nothing
the server enforces: the statement timeout never starts, and TCP_USER_TIMEOUT cannot fire while
the bytes are acknowledged. :func:`deadline` bounds the wait on our side: when a block has not
finished in time, it shuts the connection's socket, and the waiting call fails at once.

This module does not know the process's connection (``db.py`` does, and uses this one): a block
is given its connection, or a function that names it when time runs out.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import psycopg

# Which connection a block cuts: the connection itself, or a function that returns the one to
# cut (None: nothing to cut) at the moment time runs out — a block may open its connection late.
ConnectionToCut = psycopg.Connection[Any] | Callable[[], psycopg.Connection[Any] | None]


@dataclass(eq=False)
class Deadline:
    """One :func:`deadline` block: when it runs out, and whether it did (and cut its connection)."""

    conn: ConnectionToCut
    expires_at: float  # time.monotonic()
    fired: bool = False
    # Instead of cutting the connection: what to do when the block runs out (:func:`last_word`).
    action: Callable[[], None] | None = None

    def connection(self) -> psycopg.Connection[Any] | None:
        """The connection to cut, looked up now."""
        return self.conn() if callable(self.conn) else self.conn


class _Watchdog:
    """The one thread that cuts the connection of every :func:`deadline` block that runs out
    (and speaks the :func:`last_word` of every such block).

    Started on first use and then waiting, mostly for nothing: a thread per block
    (``threading.Timer``) cost about 0.3 ms of every ingest delivery, a quarter of its time on a
    local database. A block that ends is forgotten under the same lock the thread fires under,
    so a finished block is never cut.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._blocks: list[Deadline] = []
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf

    def watch(self, block: Deadline) -> None:
        with self._cond:
            self._blocks.append(block)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="db-deadlines", daemon=True)
                self._thread.start()
            elif block.expires_at < self._wakes_at:
                self._cond.notify()

    def forget(self, block: Deadline) -> None:
        with self._cond:
            self._blocks.remove(block)

    def any_fired(self) -> bool:
        with self._cond:
            return any(block.fired and block.action is None for block in self._blocks)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for block in self._blocks:
                    if not block.fired and block.expires_at <= now:
                        block.fired = True
                        if block.action is not None:
                            block.action()
                        else:
                            _sever(block.connection())
                waiting = [b.expires_at for b in self._blocks if not b.fired]
                self._wakes_at = min(waiting, default=math.inf)
                self._cond.wait(self._wakes_at - now if waiting else None)


_watchdog = _Watchdog()


def _sever(conn: psycopg.Connection[Any] | None) -> None:
    """Shut the connection's socket (from another thread): every wait on it ends in an error.

    shutdown() acts on the socket, not on our duplicate descriptor, and leaves libpq's own
    descriptor open for it to close.
    """
    if conn is None or conn.closed:
        return
    with suppress(psycopg.Error, OSError):
        duplicate = os.dup(conn.pgconn.socket)
        with socket.socket(fileno=duplicate) as sock:
            sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def deadline(seconds: float, conn: ConnectionToCut) -> Iterator[Deadline]:
    """Give the database work in the block ``seconds`` at most, on our side of the network.

    On time, nothing happens. Late, the connection (``conn``, or the one it returns then; the
    process connection is ``db.current_connection``) is cut and the call waiting on it raises
    ``StoreUnavailable``; ``db.run_repeatable`` does not retry after that (the database is not
    answering; a fresh connection would wait as long).
    """
    block = Deadline(conn, time.monotonic() + max(seconds, 0.0))
    _watchdog.watch(block)
    try:
        yield block
    finally:
        _watchdog.forget(block)


@contextmanager
def last_word(seconds: float, say: Callable[[], None]) -> Iterator[Deadline]:
    """Call ``say`` (from the watchdog's thread) if the block is still running after ``seconds``.

    For the one thing an invocation that Lambda is about to stop can still do: write the line
    that says so, where the platform's own report is not kept (ingest's ``SystemLogLevel``).
    Nothing is cut; ``say`` must be quick and must not raise.
    """
    block = Deadline(lambda: None, time.monotonic() + max(seconds, 0.0), action=say)
    _watchdog.watch(block)
    try:
        yield block
    finally:
        _watchdog.forget(block)


@contextmanager
def cut_after(seconds: float, cut: Callable[[], None]) -> Iterator[Deadline]:
    """Call ``cut`` (from the watchdog's thread) if the block is still running after ``seconds``:
    the bound for a connection that is not the database's (a certificate download from a
    sender), whose socket timeout bounds each read but not the sum of them. ``cut`` shuts the
    socket, so the waiting call fails at once; it must be quick and must not raise."""
    with last_word(seconds, cut) as block:
        yield block


def deadline_passed() -> bool:
    """Whether a :func:`deadline` around the current work has run out."""
    return _watchdog.any_fired()
