"""`webhook-inbox dev` as a user runs it: a subprocess, real HTTP, Ctrl-C, nothing left behind."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.integration.cli.conftest import CONSOLE_SCRIPT
from tests.support import ROOT
from webhook_inbox import providers

SAMPLE = ROOT / "events" / "providers.local.json"


class DevProcess:
    def __init__(self) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"DATABASE_URL", "PROVIDERS_CONFIG", "PROVIDERS_CONFIG_FILE"}
            and not k.startswith("AWS_")
        }
        self.proc = subprocess.Popen(
            [str(CONSOLE_SCRIPT), "dev", "--port", "0", "--sweep-every", "1",
             "--visibility-timeout", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group, like a terminal job
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.transcript: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.transcript.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.transcript))


def _session_processes(session_id: int) -> list[str]:
    """Every live process whose session is ``session_id`` (the dev command and its children)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[3]) == session_id and fields[0] != "Z":
            found.append(text.split(" ", 2)[:2][1])
    return found


def _processes_mentioning(fragment: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in text:
            found.append(text)
    return found


def _post(url: str, headers: dict[str, str], body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - a loopback http URL built here
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def dev() -> Iterator[DevProcess]:
    process = DevProcess()
    try:
        yield process
    finally:
        if process.proc.poll() is None:  # the test failed before stopping it: do not leak
            os.killpg(process.proc.pid, signal.SIGKILL)
            process.proc.wait(timeout=10)


def test_dev_runs_the_pipeline_and_stops_cleanly_on_ctrl_c(dev: DevProcess) -> None:
    pg_dir = dev.wait_for(r"started a throwaway PostgreSQL in (\S+)")[1]
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")

    stripe = providers.load_config_text(SAMPLE.read_text())["stripe"]
    event_id = f"evt_e2e_{uuid.uuid4().hex[:8]}"
    body = json.dumps(
        {"id": event_id, "object": "event", "type": "customer.created", "created": int(time.time()),
         "data": {"object": {"id": "cus_e2e", "object": "customer"}}}
    ).encode()  # fmt: skip
    headers = providers.sign_delivery(stripe, body)
    url = f"http://127.0.0.1:{port}/webhooks/stripe"

    assert _post(url, headers, body) == 202
    assert _post(url, headers, body) == 200  # the duplicate
    forged = dict(headers, **{"Stripe-Signature": headers["Stripe-Signature"][:-4] + "0000"})
    assert _post(url, forged, body.replace(b"cus_e2e", b"cus_evil")) == 401

    dev.wait_for(rf"stripe/{event_id} \[customer\.created\] .*-> processed", timeout=30)
    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM webhook_events WHERE provider = 'stripe'"
        ).fetchone() == (1,)
        assert conn.execute(
            "SELECT delivery_count, status FROM webhook_events WHERE event_id = %s", (event_id,)
        ).fetchone() == (2, "processed")
        assert conn.execute("SELECT customer_id FROM customers").fetchall() == [("cus_e2e",)]
        assert conn.execute("SELECT topic FROM outbox_messages").fetchall() == [
            ("customer.created",)
        ]

    # The sweeper (every second here) publishes the handler's outbox message to the bus.
    dev.wait_for(r"outbox\s+\| published to webhook-inbox-dev: customer\.created", timeout=30)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT status FROM outbox_messages").fetchall() == [("published",)]

    os.killpg(dev.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert dev.proc.wait(timeout=60) == 0
    dev.wait_for(r"dev\s+\| stopped", timeout=5)
    assert _session_processes(dev.proc.pid) == []
    assert _processes_mentioning(pg_dir) == []
    assert not Path(pg_dir).exists()
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection(("127.0.0.1", port), timeout=2),
    ):
        pass
