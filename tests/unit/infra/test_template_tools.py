"""infra/check-template.sh reuses the template tools where they already are at the pinned version,
and says what it installs otherwise (issue 29: it reinstalled 752 MB every run, even with `sam`
on PATH). The resolver runs as the script sources it, with fake tools and a fake installer."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support import ROOT

PINNED = "1.170.0"


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def _fake_python_for_venvs(tmp_path: Path) -> Path:
    """A $PY313 whose `-m venv DIR` makes a venv whose pip records what it was asked to install."""
    pip_log = tmp_path / "pip.log"
    venv_python = (
        f'if [ "$2" = pip ] && [ "$3" = install ]; then echo "$@" >> {pip_log}; '
        'touch "$(dirname "$0")/sam"; chmod +x "$(dirname "$0")/sam"; fi\n'
    )
    return _executable(
        tmp_path / "python3.13",
        f'[ "$2" = venv ] || exit 1\nmkdir -p "$3/bin"\n'
        f"cat > \"$3/bin/python\" <<'PY'\n#!/bin/sh\n{venv_python}PY\n"
        'chmod +x "$3/bin/python"\n',
    )


def _resolve(tmp_path: Path, path_dir: Path) -> subprocess.CompletedProcess[str]:
    # As check-template.sh sources it: under `set -euo pipefail`.
    script = (
        f"set -euo pipefail; . {ROOT / 'infra' / 'tools.sh'}; "
        f"resolve_tool sam aws-sam-cli {PINNED} sam"
    )
    return subprocess.run(
        ["bash", "-c", script],
        env={
            "PATH": f"{path_dir}:/usr/bin:/bin",
            "TOOLS_DIR": str(tmp_path / "tools"),
            "PY313": str(_fake_python_for_venvs(tmp_path)),
        },
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_pinned_sam_on_path_is_used_and_nothing_is_installed(tmp_path: Path) -> None:
    sam = _executable(tmp_path / "bin" / "sam", f'echo "SAM CLI, version {PINNED}"\n')
    result = _resolve(tmp_path, sam.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(sam)
    assert f"using {sam} from PATH" in result.stderr
    assert not (tmp_path / "pip.log").exists()


def test_another_version_on_path_installs_the_pinned_one_and_says_so(tmp_path: Path) -> None:
    sam = _executable(tmp_path / "bin" / "sam", 'echo "SAM CLI, version 1.99.0"\n')
    result = _resolve(tmp_path, sam.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "tools" / "sam" / "bin" / "sam")
    assert "installing into" in result.stderr
    assert f"aws-sam-cli=={PINNED}" in (tmp_path / "pip.log").read_text()


def test_a_tools_virtualenv_at_the_pinned_version_is_reused(tmp_path: Path) -> None:
    venv = tmp_path / "tools" / "sam"
    _executable(venv / "bin" / "sam", "exit 0\n")
    # Long, like pip's real answer: an early-stopping `grep -q` would close the pipe on it.
    _executable(
        venv / "bin" / "python",
        f'[ "$3" = show ] && {{ echo "Name: aws-sam-cli"; echo "Version: {PINNED}"; '
        "seq 1 20000; }\n",
    )
    result = _resolve(tmp_path, tmp_path / "empty")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(venv / "bin" / "sam")
    assert f"reusing {venv}" in result.stderr
    assert not (tmp_path / "pip.log").exists()


def test_check_template_pins_each_tool_once() -> None:
    script = (ROOT / "infra" / "check-template.sh").read_text()
    pins = re.findall(r'"(sam|checkov|cfn-lint) (\S+) (\d+\.\d+\.\d+) (\S+)"', script)
    assert sorted(p[0] for p in pins) == ["cfn-lint", "checkov", "sam"]
    assert ("sam", "aws-sam-cli", PINNED, "sam") in pins
