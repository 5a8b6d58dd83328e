"""Which addresses a connection tries: in the stack's own network, a name's IPv6 ones.

The stack's own network routes only IPv6 to the internet (an egress-only internet gateway, no
NAT), while the names the functions reach there - the AWS APIs' dual-stack endpoints - resolve
to IPv4 and IPv6 addresses alike. An IPv4 connect to them is dropped without an answer and
costs the whole connect timeout before the next address is tried. The template sets
``NETWORK_IP_FAMILY=ipv6`` there, and only there (:class:`~webhook_inbox.settings.NetworkSettings`);
both ways out ask :func:`addresses`: every AWS client (:mod:`webhook_inbox.aws`) and the
database connection (:mod:`webhook_inbox.store.db`).

A name without any IPv6 address keeps its IPv4 ones: the database the stack creates, and its
RDS Proxy, answer only on IPv4, inside the VPC, where IPv4 is routed.
"""

from __future__ import annotations

import socket

from webhook_inbox import config
from webhook_inbox.settings import NetworkSettings


def ipv6_only() -> bool:
    """Whether this function runs in the stack's own network (``NETWORK_IP_FAMILY=ipv6``)."""
    return config.current(NetworkSettings).ip_family == "ipv6"


def addresses(host: str, port: int) -> list[str] | None:
    """The addresses to connect to ``host`` on, in the resolver's order: None outside the stack's
    own network (connect as always, nothing resolved here); in it, the name's IPv6 addresses,
    or all of them when it has none. Raises :class:`socket.gaierror` when the name does not
    resolve."""
    if not ipv6_only():
        return None
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    ipv6 = [str(info[4][0]) for info in found if info[0] == socket.AF_INET6]
    chosen = ipv6 or [str(info[4][0]) for info in found]
    return list(dict.fromkeys(chosen))  # one entry per address, first place kept
