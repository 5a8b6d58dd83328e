"""What `webhook-inbox dev --reload` watches and when it restarts (issue 29); the restart itself
runs against a real dev stack in tests/e2e/test_dev_reload.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import FIXTURE_APPLICATION
from webhook_inbox_tools.cli import dev as dev_command
from webhook_inbox_tools.dev.reload import SourceWatcher, application_folder


def test_the_watcher_reports_added_modified_and_removed_files_once(tmp_path: Path) -> None:
    package = tmp_path / "app"
    (package / "sub").mkdir(parents=True)
    handlers = package / "handlers.py"
    handlers.write_text("A = 1\n")
    (package / "sub" / "old.sql").write_text("SELECT 1;\n")
    providers = tmp_path / "providers.json"
    providers.write_text("{}")
    watcher = SourceWatcher([package], [providers])
    assert watcher.changed() == []

    handlers.write_text("A = 22\n")
    (package / "sub" / "new.py").write_text("")
    (package / "sub" / "old.sql").unlink()
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "handlers.cpython-313.pyc").write_bytes(b"\0")
    (package / "notes.txt").write_text("not code")
    assert watcher.changed() == sorted(
        [handlers.resolve(), (package / "sub" / "new.py").resolve(),
         (package / "sub" / "old.sql").resolve()]
    )  # fmt: skip
    assert watcher.changed() == []  # reported once

    providers.write_text('{"providers": {}}')
    assert watcher.changed() == [providers.resolve()]


def test_the_application_is_watched_where_the_functions_import_it_from() -> None:
    assert application_folder() == (FIXTURE_APPLICATION / "webhook_inbox_app").resolve()


class _Stack:
    def __init__(self) -> None:
        self.restarts = 0

    def restart_functions(self) -> str | None:
        self.restarts += 1
        return None


def test_a_providers_file_that_stops_validating_keeps_the_running_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    providers = tmp_path / "providers.json"
    providers.write_text("{not json")
    stack: Any = _Stack()

    dev_command.reload_functions(stack, [providers.resolve()], providers)

    assert stack.restarts == 0
    assert "does not validate" in capsys.readouterr().out


def test_a_valid_providers_change_restarts_the_functions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    providers = tmp_path / "providers.json"
    secret = "whsec_ZGV2LW9ubHktZXhhbXBsZS1zZWNyZXQ="
    providers.write_text(json.dumps({"providers": {"example": {
        "scheme": "standard-webhooks", "secrets": [{"value": secret}]}}}))  # fmt: skip
    stack: Any = _Stack()

    dev_command.reload_functions(stack, [providers.resolve()], providers)

    assert stack.restarts == 1
    assert "functions restarted with the new code" in capsys.readouterr().out


def test_a_reload_after_a_failed_start_waits_for_no_environment() -> None:
    """After a start that failed no ingest environment is in service: the next reload must not
    wait the ingest timeout for environments that do not exist (it restarts at once), and a
    delivery meanwhile is answered 503 with the reason, at once."""
    import json
    import time

    from webhook_inbox_tools.dev.gateway import IngestGateway

    gateway = IngestGateway("127.0.0.1", 0)
    try:
        started = time.monotonic()
        assert gateway.take_workers(2, timeout=30) == []
        assert time.monotonic() - started < 5
        gateway.broken = "handlers.py, line 3: NameError: name 'x' is not defined"
        status, headers, body, outcome = gateway.invoke({})
        assert (status, headers["Retry-After"], outcome) == (503, "1", None)
        assert json.loads(body)["dev"].startswith("handlers.py, line 3")
    finally:
        gateway.stop()
