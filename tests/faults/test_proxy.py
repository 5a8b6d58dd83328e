"""The fault proxy itself: each control does what it says, against real sockets."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import boto3
import psycopg
import pytest
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError

from tests.faults.fixtures import MotoEndpoint
from tests.faults.proxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo_proxy() -> Iterator[FaultProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with FaultProxy(server.server_address) as proxy:  # type: ignore[arg-type]
            yield proxy
    finally:
        server.shutdown()
        server.server_close()


def _client(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def _exchange(proxy: FaultProxy, data: bytes) -> bytes:
    with _client(proxy) as sock:
        sock.sendall(data)
        return sock.recv(16)


def test_forwards_both_ways_and_adds_latency_per_direction(echo_proxy: FaultProxy) -> None:
    with _client(echo_proxy) as sock:
        sock.sendall(b"ping")
        assert sock.recv(16) == b"ping"
        echo_proxy.latency(up_ms=100, down_ms=50, jitter_ms=5)
        started = time.monotonic()
        sock.sendall(b"slow")
        assert sock.recv(16) == b"slow"
        assert time.monotonic() - started >= 0.14


def test_blackhole_accepts_and_never_answers_until_lifted(echo_proxy: FaultProxy) -> None:
    echo_proxy.set_blackhole(True)
    with _client(echo_proxy) as sock:
        sock.settimeout(0.3)
        sock.sendall(b"anyone?")
        with pytest.raises(TimeoutError):
            sock.recv(16)
        echo_proxy.set_blackhole(False)
        sock.settimeout(2)
        assert sock.recv(16) == b"anyone?"


def test_refuse_resets_new_connections(echo_proxy: FaultProxy) -> None:
    echo_proxy.refuse = True
    # The reset may arrive during connect() or on first use, depending on timing.
    with pytest.raises(ConnectionResetError):
        _exchange(echo_proxy, b"x")
    assert echo_proxy.refused == 1
    echo_proxy.refuse = False
    assert _exchange(echo_proxy, b"back") == b"back"


def test_idle_connections_are_closed_busy_ones_are_not(echo_proxy: FaultProxy) -> None:
    echo_proxy.idle_timeout_s = 0.3
    with _client(echo_proxy) as idle, _client(echo_proxy) as busy:
        for _ in range(6):
            busy.sendall(b"k")
            assert busy.recv(1) == b"k"
            time.sleep(0.1)
        assert idle.recv(16) == b""  # the proxy closed it: EOF
    assert echo_proxy.idle_closed >= 1


def test_postgres_through_the_proxy_and_a_reset_after_the_server_ran_the_statement(
    faulty_database_url: str, pg_proxy: FaultProxy, conn: psycopg.Connection[object]
) -> None:
    conn.execute("CREATE TABLE reached (n int)")
    with psycopg.connect(faulty_database_url, autocommit=True) as through:
        assert through.execute("SELECT 1").fetchone() == (1,)
        pg_proxy.reset_next_request()
        with pytest.raises(psycopg.OperationalError):
            through.execute("INSERT INTO reached VALUES (1)")
        assert through.broken
    # The statement reached the server before the reset: the client cannot know it ran.
    deadline = time.monotonic() + 5
    while conn.execute("SELECT count(*) FROM reached").fetchone() != (1,):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert pg_proxy.resets == 1


def test_postgres_connection_closed_by_the_proxy_breaks_on_next_use(
    faulty_database_url: str, pg_proxy: FaultProxy
) -> None:
    with psycopg.connect(faulty_database_url, autocommit=True) as through:
        assert pg_proxy.close_all() == 1
        assert not through.closed  # the local flag cannot know
        with pytest.raises(psycopg.OperationalError):
            through.execute("SELECT 1")
        assert through.broken


def test_moto_through_the_proxy_and_a_blackholed_endpoint_times_out(
    moto_endpoint: MotoEndpoint,
) -> None:
    # Only the call under the blackhole gets the short read timeout: moto's first answer can take
    # longer than 0.5 s on a loaded machine (it loads the service's backend on first use).
    boto3.client("sqs", endpoint_url=moto_endpoint.url).create_queue(QueueName="through-proxy")
    sqs = boto3.client(
        "sqs",
        endpoint_url=moto_endpoint.url,
        config=Config(connect_timeout=1, read_timeout=0.5, retries={"total_max_attempts": 1}),
    )
    moto_endpoint.proxy.set_blackhole(True)
    started = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        sqs.list_queues()
    assert time.monotonic() - started < 3
