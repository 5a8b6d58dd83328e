"""Fault-layer fixtures (a pytest plugin, loaded by tests/conftest.py).

``pg_proxy`` sits between the code under test and the session's PostgreSQL; ``faulty_database_url``
is this test's database reached through it (and is what DATABASE_URL points at). ``moto_endpoint``
is a ThreadedMotoServer behind its own proxy, for AWS calls over a real socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.faults.proxy import FaultProxy, pg_upstream, via_proxy
from tests.support import PostgresServer
from webhook_inbox.store import db


@pytest.fixture
def pg_proxy(pg_server: PostgresServer) -> Iterator[FaultProxy]:
    with FaultProxy(pg_upstream(pg_server.admin_url)) as proxy:
        yield proxy


@pytest.fixture
def faulty_database_url(
    database_url: str, pg_proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> str:
    """This test's database through the fault proxy; the functions connect to it this way."""
    url = via_proxy(database_url, pg_proxy)
    monkeypatch.setenv("DATABASE_URL", url)
    db.reset_for_tests()  # whatever read the settings before reads them again, through the proxy
    return url


@dataclass
class MotoEndpoint:
    proxy: FaultProxy
    url: str  # what boto3 clients take as endpoint_url


@pytest.fixture
def moto_endpoint() -> Iterator[MotoEndpoint]:
    from moto.server import ThreadedMotoServer

    from tests.reliability.infra import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        with FaultProxy(("127.0.0.1", port)) as proxy:
            yield MotoEndpoint(proxy, f"http://127.0.0.1:{proxy.port}")
    finally:
        server.stop()
