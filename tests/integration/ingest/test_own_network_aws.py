"""The AWS clients in the stack's own network: a dual-stack endpoint's IPv6 addresses only.

ingest's wake-up (SQS SendMessage, with ingest's call limits) goes to a moto server listening
on ``::1`` only, by a made-up name that resolves to 127.0.0.1 first and ::1 second
(tests/faults/resolver.py); every connect the calling thread makes is recorded.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.faults.resolver import Connects, resolving, set_ip_family
from webhook_inbox import aws

NAME = "sqs.own-network.test"


@pytest.fixture
def ipv6_moto() -> Iterator[int]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="::1", port=0, verbose=False)
    server.start()
    try:
        yield server.get_host_and_port()[1]
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def fresh_clients() -> Iterator[None]:
    aws.reset()
    yield
    aws.reset()


def _send_wakeup(port: int) -> str | None:
    sqs = aws.client(
        "sqs", region_name="us-east-1", endpoint_url=f"http://{NAME}:{port}", limits=aws.INGEST
    )
    queue_url = sqs.create_queue(QueueName="processing")["QueueUrl"]
    return aws.send_wakeup(sqs, queue_url, 7)


def test_in_the_own_network_no_ipv4_connect_is_attempted(
    ipv6_moto: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_ip_family(monkeypatch, "ipv6")
    with resolving(NAME, ["127.0.0.1", "::1"]), Connects() as seen:
        assert _send_wakeup(ipv6_moto) is None

    assert seen.calls, "the client connected"
    assert set(seen.families) == {socket.AF_INET6}
    assert {address[0] for _, address in seen.calls} == {"::1"}


def test_outside_the_own_network_the_resolvers_order_is_kept(
    ipv6_moto: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As botocore always did: IPv4 first (refused here, nothing listens there), then IPv6."""
    set_ip_family(monkeypatch, None)
    with resolving(NAME, ["127.0.0.1", "::1"]), Connects() as seen:
        assert _send_wakeup(ipv6_moto) is None

    assert seen.families[:2] == [socket.AF_INET, socket.AF_INET6]
    from botocore import awsrequest

    assert awsrequest.AWSHTTPSConnectionPool.ConnectionCls is awsrequest.AWSHTTPSConnection
    assert awsrequest.AWSHTTPConnectionPool.ConnectionCls is awsrequest.AWSHTTPConnection


def test_a_name_without_ipv6_is_still_reached_on_ipv4(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the own network only a name with no IPv6 address at all is tried on IPv4."""
    from moto.server import ThreadedMotoServer

    set_ip_family(monkeypatch, "ipv6")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        port = server.get_host_and_port()[1]
        with resolving(NAME, ["127.0.0.1"]), Connects() as seen:
            assert _send_wakeup(port) is None
    finally:
        server.stop()
    assert set(seen.families) == {socket.AF_INET}


def test_every_ipv6_address_is_tried_in_turn(
    ipv6_moto: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first IPv6 address refuses: the next is tried, as urllib3 goes through a name's.
    (An IPv4-mapped loopback address: an AF_INET6 socket, on which nothing listens.)"""
    set_ip_family(monkeypatch, "ipv6")
    refusing = "::ffff:127.0.0.1"
    monkeypatch.setattr(
        "webhook_inbox.network.addresses",
        lambda host, port: [refusing, "::1"] if host == NAME else None,
    )
    with Connects() as seen:
        assert _send_wakeup(ipv6_moto) is None
    assert [address[0] for _, address in seen.calls[:2]] == [refusing, "::1"]
    assert set(seen.families) == {socket.AF_INET6}
