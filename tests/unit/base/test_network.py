"""Which addresses a connection tries (webhook_inbox.network): the one rule both ways out use."""

from __future__ import annotations

import socket

import pytest

from tests.faults.resolver import resolving, set_ip_family
from webhook_inbox import config, network
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.settings import NetworkSettings

NAME = "endpoint.own-network.test"


def test_in_the_own_network_a_dual_stack_name_gives_its_ipv6_addresses_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_ip_family(monkeypatch, "ipv6")
    with resolving(NAME, ["127.0.0.1", "::1"]):
        assert network.ipv6_only()
        assert network.addresses(NAME, 443) == ["::1"]


def test_a_name_without_ipv6_keeps_its_ipv4_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    set_ip_family(monkeypatch, "ipv6")
    with resolving(NAME, ["127.0.0.1"]):
        assert network.addresses(NAME, 5432) == ["127.0.0.1"]


def test_outside_the_own_network_nothing_is_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    set_ip_family(monkeypatch, None)
    monkeypatch.setattr(socket, "getaddrinfo", pytest.fail)
    assert not network.ipv6_only()
    assert network.addresses(NAME, 443) is None


def test_a_name_that_does_not_resolve_raises_the_resolvers_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_ip_family(monkeypatch, "ipv6")
    with resolving(NAME, []), pytest.raises(socket.gaierror):
        network.addresses(NAME, 443)


@pytest.mark.parametrize("value", ["ipv4", "IPv6 ", "dual"])
def test_only_ipv6_or_unset_is_a_network_ip_family(value: str) -> None:
    with pytest.raises(ConfigurationError, match="NETWORK_IP_FAMILY"):
        config.load(NetworkSettings, {"NETWORK_IP_FAMILY": value})
