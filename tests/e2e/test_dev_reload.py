"""`webhook-inbox dev` picks up edits: with --reload (the default) a change to your
application restarts the functions and the next deliveries run the new code, while the database
and the queue keep what they hold; with --no-reload the first change says a restart is needed;
an edit that does not import keeps dev running until the next one fixes it.

Each test edits a copy of application/webhook_inbox_app that dev imports through PYTHONPATH, so
the checkout is never touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.dev_support import DevProcess, clean_env, post, wait_until
from tests.e2e.test_dev_lifecycle import STOP_WITHIN_S
from tests.integration.cli.conftest import CONSOLE_SCRIPT
from tests.support import FIXTURE_APPLICATION, ROOT
from webhook_inbox.ingest import providers
from webhook_inbox_tools.dev.workers import INGEST_TIMEOUT_S

SAMPLE = ROOT / "events" / "providers.local.json"
RELOADED_ERROR = "handled by the reloaded code"
NEW_HANDLER = f'''
from webhook_inbox.errors import PermanentEventError


def refuse(conn, event):
    raise PermanentEventError("{RELOADED_ERROR}")
'''


@pytest.fixture
def application(tmp_path: Path) -> Path:
    """A copy of the example application to edit; its parent goes on dev's PYTHONPATH."""
    copy = tmp_path / "app" / "webhook_inbox_app"
    shutil.copytree(
        FIXTURE_APPLICATION / "webhook_inbox_app",
        copy,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return copy


@pytest.fixture
def dev_processes() -> Iterator[list[DevProcess]]:
    processes: list[DevProcess] = []
    yield processes
    for process in processes:
        if process.proc.poll() is None:
            process.proc.send_signal(2)  # SIGINT, as Ctrl-C
            process.proc.wait(timeout=STOP_WITHIN_S)
        process.remove_folder()


def _start(processes: list[DevProcess], application: Path, *args: str) -> DevProcess:
    dev = DevProcess(
        "--ingest-concurrency", "1", *args, env={"PYTHONPATH": str(application.parent)}
    )
    processes.append(dev)
    return dev


def _send(port: int) -> tuple[str, int]:
    stripe = providers.load_config_text(SAMPLE.read_text())["stripe"]
    event_id = f"evt_{uuid.uuid4().hex[:12]}"
    body = json.dumps(
        {"id": event_id, "object": "event", "type": "customer.created",
         "created": int(time.time()), "data": {"object": {"id": f"cus_{uuid.uuid4().hex[:8]}"}}}
    ).encode()  # fmt: skip
    headers = providers.sign_delivery(stripe, body).headers
    return event_id, post(f"http://127.0.0.1:{port}/webhooks/stripe", headers, body)


def _send_raw(port: int) -> tuple[int, str]:
    """A signed delivery, and the answer's status and body."""
    stripe = providers.load_config_text(SAMPLE.read_text())["stripe"]
    body = json.dumps({"id": f"evt_{uuid.uuid4().hex[:12]}", "object": "event",
                       "type": "customer.created", "data": {"object": {}}}).encode()  # fmt: skip
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhooks/stripe",
        data=body,
        headers=providers.sign_delivery(stripe, body).headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _rows(database_url: str) -> dict[str, tuple[str, str | None]]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT event_id, status, last_error FROM webhook_events").fetchall()
    return {event_id: (status, error) for event_id, status, error in rows}


def _point_customer_created_at_new_code(application: Path) -> None:
    (application / "reloaded.py").write_text(NEW_HANDLER)
    handlers = application / "handlers.py"
    text = handlers.read_text().replace(
        "from webhook_inbox_app import examples",
        "from webhook_inbox_app import examples, reloaded",
    )
    text = text.replace(
        '("stripe", "customer.created"): examples.stripe_customer_created',
        '("stripe", "customer.created"): reloaded.refuse',
    )
    assert "reloaded.refuse" in text
    handlers.write_text(text)


def test_an_edit_restarts_the_functions_and_keeps_the_database_and_queue(
    dev_processes: list[DevProcess], application: Path
) -> None:
    dev = _start(dev_processes, application)
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    assert str(application) in dev.wait_for(r"watching (.*)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")
    before, status = _send(port)
    assert status == 202
    wait_until(lambda: _rows(database_url).get(before, ("",))[0] == "processed", 30, "processed")

    _point_customer_created_at_new_code(application)

    # Deliveries sent while the functions restart are answered once they are back; keep sending
    # until one has run the new code (the old processor may still take the first ones).
    accepted = [before]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        event_id, status = _send(port)
        if status == 202:
            accepted.append(event_id)
        rows = _rows(database_url)
        if any(error == RELOADED_ERROR for _, error in rows.values()):
            break
        time.sleep(0.5)
    rows = _rows(database_url)
    assert any(error == RELOADED_ERROR for _, error in rows.values()), rows
    # Nothing accepted was lost across the restart: every row reaches a terminal state, and the
    # row from before the edit is still there as it was.
    wait_until(
        lambda: all(_rows(database_url)[e][0] in {"processed", "dead_letter"} for e in accepted),
        60,
        "every accepted delivery terminal",
    )
    assert _rows(database_url)[before] == ("processed", None)


def test_without_reload_the_first_change_says_a_restart_is_needed(
    dev_processes: list[DevProcess], application: Path
) -> None:
    dev = _start(dev_processes, application, "--no-reload")
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")

    _point_customer_created_at_new_code(application)
    line = dev.wait_for(r"changed: the functions still run the code they started with", 30)
    assert "handlers.py" in line.string or "reloaded.py" in line.string

    event_id, status = _send(port)
    assert status == 202
    wait_until(lambda: _rows(database_url).get(event_id, ("",))[0] == "processed", 30, "old code")


def test_an_edit_that_does_not_import_keeps_dev_running_until_fixed(
    dev_processes: list[DevProcess], application: Path
) -> None:
    dev = _start(dev_processes, application)
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")
    handlers = application / "handlers.py"
    good = handlers.read_text()

    broken_line = len(good.splitlines()) + 2
    handlers.write_text(good + "\nthis is not python\n")
    said = dev.wait_for(r"the functions did not start again: (.*)", 60)[1]
    assert f"handlers.py, line {broken_line}: NameError" in said  # the file and the line
    assert dev.proc.poll() is None  # still running, waiting for the fix
    # Meanwhile a delivery is answered at once, 503 with the reason; and trigger shows it.
    started = time.monotonic()
    status, answer = _send_raw(port)
    assert status == 503
    assert time.monotonic() - started < INGEST_TIMEOUT_S / 2  # not after the ingest timeout
    assert f"handlers.py, line {broken_line}" in answer
    triggered = subprocess.run(
        [str(CONSOLE_SCRIPT), "trigger", "stripe", "customer.created"], cwd=dev.cwd,
        env=clean_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "503 Service Unavailable" in triggered.stdout, triggered.stdout + triggered.stderr
    assert "handlers.py, line" in triggered.stdout
    assert "is dev running" not in triggered.stdout + triggered.stderr

    fixed_at = time.monotonic()
    handlers.write_text(good)
    dev.wait_for(r"functions restarted with the new code", 60)
    # At once, not after the ingest timeout the previous reload used to wait out.
    assert time.monotonic() - fixed_at < INGEST_TIMEOUT_S / 2
    event_id, status = _send(port)
    assert status == 202
    wait_until(lambda: _rows(database_url).get(event_id, ("",))[0] == "processed", 30, "fixed")
    assert not [line for line in dev.transcript if "Traceback" in line]
