"""A dual-stack name on loopback, and a record of the connects a thread makes.

:func:`resolving` makes one made-up name resolve, for Python's ``socket.getaddrinfo``, to the
loopback addresses given, in that order (IPv4 first, as a resolver may answer), on whatever port
is asked, as a dual-stack AWS endpoint's name resolves in the stack's own network. Every other
name resolves as always. libpq resolves in C and never sees the name: a connection that reaches
the database through it was given its address by Python.

:class:`Connects` records ``socket.socket.connect`` calls (family and address) made by the
thread that entered it; other threads (a proxy's loop, a moto server) are not recorded.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from webhook_inbox import config

LOOPBACKS = ("127.0.0.1", "::1")


@contextmanager
def resolving(name: str, addresses: Sequence[str]) -> Iterator[None]:
    """``name`` resolves to ``addresses`` (loopback only) while the block runs."""
    if not set(addresses) <= set(LOOPBACKS):
        raise ValueError(f"loopback addresses only, not {addresses!r}")
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, family: int = 0, *args: Any, **kwargs: Any) -> Any:
        if host != name:
            return real(host, port, family, *args, **kwargs)
        number = int(port or 0)
        found = []
        for address in addresses:
            kind = socket.AF_INET6 if ":" in address else socket.AF_INET
            if family in (0, socket.AF_UNSPEC, kind):
                where = (address, number, 0, 0) if kind == socket.AF_INET6 else (address, number)
                found.append((kind, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", where))
        if not found:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return found

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    try:
        yield
    finally:
        socket.getaddrinfo = real


class Connects:
    """``with Connects() as seen:`` → ``seen.calls``: (family, address) of each connect this
    thread made in the block, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[socket.AddressFamily, Any]] = []
        self._thread = threading.get_ident()
        self._real = socket.socket.connect

    def __enter__(self) -> Connects:
        real, calls, thread = self._real, self.calls, self._thread

        def connect(sock: socket.socket, address: Any) -> None:
            if threading.get_ident() == thread:
                calls.append((sock.family, address))
            real(sock, address)

        socket.socket.connect = connect  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        socket.socket.connect = self._real  # type: ignore[method-assign]

    @property
    def families(self) -> list[socket.AddressFamily]:
        return [family for family, _ in self.calls]


def set_ip_family(monkeypatch: pytest.MonkeyPatch, family: str | None) -> None:
    """``NETWORK_IP_FAMILY`` as the template sets it (``ipv6`` in the own network, None: unset),
    the settings read again."""
    if family is None:
        monkeypatch.delenv("NETWORK_IP_FAMILY", raising=False)
    else:
        monkeypatch.setenv("NETWORK_IP_FAMILY", family)
    config.reset()
