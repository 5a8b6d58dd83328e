"""The database connection in the stack's own network: a name's IPv6 addresses, never its IPv4.

A real PostgreSQL is reached through a fault proxy listening on ``::1`` only, by a made-up name
that resolves to 127.0.0.1 first and ::1 second (tests/faults/resolver.py). libpq cannot
resolve that name itself, so a connection that works was given the address by Python, and the
conninfo libpq got is looked at directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.faults.proxy import FaultProxy, pg_upstream
from tests.faults.resolver import resolving, set_ip_family
from webhook_inbox import config
from webhook_inbox.store import db

NAME = "database.own-network.test"


@pytest.fixture
def given_to_libpq(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every conninfo the store's connection class is asked to connect with, as a dict."""
    seen: list[dict[str, Any]] = []
    real = db.Connection.connect

    def connect(conninfo: str = "", **kwargs: Any) -> Any:
        seen.append(conninfo_to_dict(conninfo))
        return real(conninfo, **kwargs)

    monkeypatch.setattr(db.Connection, "connect", staticmethod(connect))
    return seen


def _url_by_name(database_url: str, proxy: FaultProxy) -> str:
    params = conninfo_to_dict(database_url)
    params.update(host=NAME, port=str(proxy.port), sslmode="disable", gssencmode="disable")
    return make_conninfo(**params)


@pytest.fixture
def ipv6_proxy(database_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(pg_upstream(database_url), listen_host="::1") as proxy:
        yield proxy


def _use(monkeypatch: pytest.MonkeyPatch, url: str, family: str | None) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    set_ip_family(monkeypatch, family)
    db.reset_for_tests()


def test_in_the_own_network_libpq_gets_only_the_names_ipv6_address(
    database_url: str,
    ipv6_proxy: FaultProxy,
    given_to_libpq: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _use(monkeypatch, _url_by_name(database_url, ipv6_proxy), "ipv6")
    with resolving(NAME, ["127.0.0.1", "::1"]):
        conn = db.get_connection()
        assert conn.execute("SELECT 1").fetchone() == (1,)

    assert conn.info.hostaddr == "::1"
    assert conn.info.host == NAME  # TLS and the IAM token name the host, not the address
    [params] = given_to_libpq
    assert (params["host"], params["hostaddr"]) == (NAME, "::1")
    assert ipv6_proxy.accepted == 1
    db.reset_for_tests()


def test_a_name_without_ipv6_keeps_its_ipv4_addresses(
    database_url: str, given_to_libpq: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database the stack creates (and its RDS Proxy) answers on IPv4 only, in the VPC."""
    with FaultProxy(pg_upstream(database_url)) as proxy:
        _use(monkeypatch, _url_by_name(database_url, proxy), "ipv6")
        with resolving(NAME, ["127.0.0.1"]):
            conn = db.get_connection()
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert conn.info.hostaddr == "127.0.0.1"
        db.reset_for_tests()
    assert given_to_libpq[0]["hostaddr"] == "127.0.0.1"


def test_outside_the_own_network_the_conninfo_reaches_libpq_unchanged(
    database_url: str, given_to_libpq: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, database_url, None)
    looked_up: list[object] = []
    monkeypatch.setattr("socket.getaddrinfo", lambda *a, **k: looked_up.append(a) or [])

    conn = db.get_connection()

    assert conn.execute("SELECT 1").fetchone() == (1,)
    assert given_to_libpq == [conninfo_to_dict(database_url)]
    assert looked_up == []  # nothing resolved in Python
    db.reset_for_tests()


def test_several_ipv6_addresses_are_each_paired_with_the_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NETWORK_IP_FAMILY", "ipv6")
    config.reset()
    monkeypatch.setattr(
        "webhook_inbox.network.addresses", lambda host, port: ["2001:db8::1", "2001:db8::2"]
    )
    url = "postgresql://app:tok%2Fen@proxy.example:5432/inbox?sslmode=require"

    params = conninfo_to_dict(db.with_host_addresses(url))

    assert params["host"] == "proxy.example,proxy.example"
    assert params["hostaddr"] == "2001:db8::1,2001:db8::2"
    # The IAM token (the password) and everything else travel as they were.
    assert (params["password"], params["user"], params["port"]) == ("tok/en", "app", "5432")
    assert params["sslmode"] == "require"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app@/inbox?host=/tmp",  # a Unix socket
        "postgresql://app@[::1]:5432/inbox",  # an address already
        "postgresql://app@a.example,b.example/inbox",  # several hosts: libpq's own list
        "host=db.example hostaddr=10.0.0.5 dbname=inbox",  # an address given
    ],
)
def test_conninfo_that_names_no_single_host_is_left_to_libpq(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NETWORK_IP_FAMILY", "ipv6")
    config.reset()
    monkeypatch.setattr("webhook_inbox.network.addresses", lambda host, port: [host])
    assert db.with_host_addresses(url) == url
