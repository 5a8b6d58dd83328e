"""The files `webhook-inbox dev` writes for other shells: whose they are, when it removes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from webhook_inbox_tools.cli.dev import remove_if_unchanged, running_owner, write_env_file


def exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_env_file_names_its_writer_and_a_live_writer_owns_it(tmp_path: Path) -> None:
    path = tmp_path / "dev.env"
    write_env_file(path, {"DATABASE_URL": "postgresql://x"})
    assert running_owner(path) is None  # written by this process: its own

    path.write_text(path.read_text().replace(f"pid {os.getpid()}", f"pid {os.getppid()}"))
    assert running_owner(path) == os.getppid()


def test_a_file_left_by_a_killed_dev_or_written_by_hand_has_no_owner(tmp_path: Path) -> None:
    path = tmp_path / "dev.env"
    path.write_text(f"# written by webhook-inbox dev, pid {exited_pid()}\nA=1\n")
    assert running_owner(path) is None
    path.write_text("A=1\n")
    assert running_owner(path) is None
    assert running_owner(tmp_path / "absent.env") is None


def test_a_file_is_removed_on_exit_only_while_it_still_holds_what_this_run_wrote(
    tmp_path: Path,
) -> None:
    ours, replaced = tmp_path / "ours.env", tmp_path / "replaced.env"
    for path in (ours, replaced):
        path.write_text("A=1\n")
    replaced.write_text("A=2\n")  # another dev wrote its own since

    remove_if_unchanged(ours, b"A=1\n")
    remove_if_unchanged(replaced, b"A=1\n")
    remove_if_unchanged(tmp_path / "gone.env", b"A=1\n")

    assert not ours.exists()
    assert replaced.read_text() == "A=2\n"


def test_the_env_file_is_private_and_reads_back_exactly(tmp_path: Path) -> None:
    from webhook_inbox_tools.dev.env_file import running_dev_environment

    path = tmp_path / "dev.env"
    values = {
        "PROVIDERS_CONFIG": '{"providers": {"a b": {"secrets": [{"value": "it\'s $HOME"}]}}}',
        "WEBHOOK_INBOX_URL": "http://127.0.0.1:3000",
        "EMPTY": "",
    }
    write_env_file(path, values)
    assert path.stat().st_mode & 0o777 == 0o600  # may inline the dev secrets it serves
    # Read by another process while this one (standing for dev) runs...
    path.write_text(path.read_text().replace(f"pid {os.getpid()}", f"pid {os.getppid()}"))
    assert running_dev_environment(path) == values
    # ... and as a shell loads it.
    shell = subprocess.run(
        ["bash", "-c", f'set -a; . "{path}"; set +a; printf %s "$PROVIDERS_CONFIG"'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert shell.stdout == values["PROVIDERS_CONFIG"]
    # A file no running dev owns says nothing.
    path.write_text(path.read_text().replace(f"pid {os.getppid()}", f"pid {exited_pid()}"))
    assert running_dev_environment(path) == {}


def test_the_operator_environment_names_what_dev_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from webhook_inbox.config import reset as reset_settings
    from webhook_inbox_tools.cli.dev import operator_environment

    registry = "arn:aws:secretsmanager:us-east-1:123456789012:secret:reg-AbCdEf"
    stack: Any = SimpleNamespace(
        database_url="postgresql://x",
        queue_url="http://q",
        providers_registry_arn=registry,
        aws_env=lambda: {"AWS_REGION": "r", "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"},
    )
    config = tmp_path / "providers.json"
    env = operator_environment(stack, "http://127.0.0.1:3000", config)
    assert env["PROVIDERS_CONFIG_FILE"] == str(config)
    assert env["WEBHOOK_INBOX_URL"] == "http://127.0.0.1:3000"
    # The providers commands find dev's registry, and the moto that holds it.
    assert env["PROVIDERS_REGISTRY_ARN"] == registry
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5000"
    monkeypatch.setenv("PROVIDERS_CONFIG", '{"providers": {}}')
    reset_settings()  # the environment changed after the first read
    assert operator_environment(stack, "u", None)["PROVIDERS_CONFIG"] == '{"providers": {}}'
    monkeypatch.delenv("PROVIDERS_CONFIG")
    monkeypatch.setenv("PROVIDERS_CONFIG_FILE", "relative.json")
    reset_settings()
    served = operator_environment(stack, "u", None)["PROVIDERS_CONFIG_FILE"]
    assert served == str(Path("relative.json").resolve())  # another shell's folder may differ
