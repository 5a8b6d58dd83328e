"""`webhook-inbox psql` without a running dev says what to do (the way in with one running is
tested against a real dev: tests/e2e/test_dev_trigger_and_console.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook_inbox_tools.cli import main


def test_without_a_running_dev_it_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["psql", "--url"]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert "no webhook-inbox dev is running from this folder" in said.err
    assert "webhook-inbox dev" in said.err
