"""The Lambda runtime's Python is found as a real interpreter, never as a pyenv shim that only runs
while its version is selected (issue 29: `invoke`'s child exited 127 under PYENV_VERSION=3.13.0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from webhook_inbox_tools.find_python import PythonNotFound, find_python, search_installed

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
BASE = Path(getattr(sys, "_base_executable", sys.executable)).resolve()


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def _pyenv_shim(bin_dir: Path) -> Path:
    """Like pyenv's shim: runs the real interpreter only while PYENV_VERSION selects it."""
    return _script(
        bin_dir / f"python{HERE}",
        f'[ -n "$PYENV_VERSION" ] || {{ echo "python{HERE}: command not found" >&2; exit 127; }}\n'
        f'exec "{BASE}" "$@"\n',
    )


def _runs_with_no_environment(interpreter: str) -> bool:
    return subprocess.run([interpreter, "-c", ""], env={}, check=False).returncode == 0


def test_a_selected_shim_is_resolved_to_the_interpreter_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _pyenv_shim(tmp_path / "shims")
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYENV_VERSION", f"{HERE}.0")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))

    found = search_installed(HERE)

    assert found == str(BASE)
    assert _runs_with_no_environment(found)  # the shim itself would exit 127 here
    assert not _runs_with_no_environment(str(shim))


def test_an_unselected_shim_falls_back_to_pyenvs_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _pyenv_shim(tmp_path / "shims")
    install = tmp_path / "pyenv" / "versions" / f"{HERE}.7" / "bin" / f"python{HERE}"
    install.parent.mkdir(parents=True)
    install.symlink_to(BASE)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))

    assert search_installed(HERE) == str(BASE)


def test_nothing_usable_names_everything_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = _pyenv_shim(tmp_path / "shims")
    wrong = _script(
        tmp_path / "pyenv" / "versions" / f"{HERE}.1" / "bin" / f"python{HERE}",
        "echo /elsewhere/python; echo 3.99\n",
    )
    monkeypatch.setenv("PATH", str(shim.parent))
    monkeypatch.delenv("PYENV_VERSION", raising=False)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))

    with pytest.raises(PythonNotFound) as caught:
        search_installed(HERE)

    message = str(caught.value)
    assert f"{shim} (exit status 127)" in message
    assert f"{wrong} (is Python 3.99)" in message
    assert f"pyenv install {HERE}" in message


def test_the_running_version_is_the_base_interpreter_not_a_virtualenv() -> None:
    found = find_python(HERE)
    assert found == str(BASE)
    assert _runs_with_no_environment(found)


def _make_dev_dry_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # `make -n` prints the commands without running them; PYTHON comes from find_python.py.
    env = {k: v for k, v in env.items() if k not in {"PYTHON", "MAKEFLAGS"}}
    return subprocess.run(
        ["make", "-n", "dev"], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


def test_make_dev_creates_the_virtualenv_with_an_absolute_interpreter() -> None:
    try:
        expected = find_python("3.13")
    except PythonNotFound:
        pytest.fail("this machine has no Python 3.13: the Lambda runtime's version is needed")
    printed = _make_dev_dry_run(dict(os.environ)).stdout
    venv_line = next(line for line in printed.splitlines() if " -m venv " in line)
    assert venv_line.split(" -m venv ")[0] == expected
    assert _runs_with_no_environment(expected)


def test_make_dev_stops_before_anything_when_no_python_313_was_found(tmp_path: Path) -> None:
    # PYTHON empty is what the lookup leaves when it fails (its reasons print above this line).
    result = subprocess.run(
        ["make", "dev", "PYTHON=", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "make dev: no Python 3.13" in result.stderr
    assert not (tmp_path / "venv").exists()
