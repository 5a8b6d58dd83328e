"""`.ci/run` stops on every failing check (set -e does not see a failure left of `&&`)."""

from __future__ import annotations

import re
import shlex

from tests.support import ROOT


def test_every_check_in_ci_is_a_command_of_its_own() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in script
    checks = re.compile(r"\b(ruff|mypy|pytest|check-template\.sh)\b")
    masked = [
        line.strip()
        for line in script.splitlines()
        if checks.search(line) and "&&" in line and not line.lstrip().startswith("#")
    ]
    assert masked == []
    for command in ("ruff check .", "ruff format --check .", "mypy", "pytest"):
        own_line = rf"^(echo [^;]*;\s*)?{re.escape(command)}$"
        assert re.search(own_line, script, re.MULTILINE), command


def pip_install_arguments(text: str, marker: str) -> list[list[str]]:
    """The arguments of every `pip install` of the project (the line names `marker`), with
    `--quiet` left out: it changes what pip prints, not what it installs."""
    found = []
    for line in text.splitlines():
        if "pip install" in line and marker in line and not line.lstrip().startswith("#"):
            command = line.split("pip install", 1)[1].split("&&")[0].strip().rstrip("`")
            found.append([arg for arg in shlex.split(command) if arg != "--quiet"])
    return found


def test_ci_installs_the_project_exactly_as_the_readme_does() -> None:
    """The README's install is what CI tests: the same constraints, the same extra; a README
    that installed other versions than CI (and than the layer ships) would fail the user's
    `infra/check-template.sh` right after the quick start."""
    (readme,) = pip_install_arguments((ROOT / "README.md").read_text(), "'.[dev]'")
    ci = pip_install_arguments((ROOT / ".ci" / "run").read_text(), "'.[dev]'")
    make = pip_install_arguments((ROOT / "Makefile").read_text(), "'.[dev]'")
    assert readme == ["-c", "layers/shared/constraints.txt", "-e", ".[dev]"]
    assert ci, "no install of the project in .ci/run"
    assert all(arguments == readme for arguments in ci), ci
    assert make == [readme]
    # Nothing else is installed into CI's project virtualenvs first (a lock installed before the
    # project would hide a README install that resolves differently).
    ci_text = (ROOT / ".ci" / "run").read_text()
    other_installs = [
        line.strip()
        for line in ci_text.splitlines()
        if "pip install" in line
        and "'.[dev]'" not in line
        and "--upgrade pip" not in line
        and not line.lstrip().startswith("#")
    ]
    assert other_installs == []


def test_ci_runs_every_test_command_of_the_readme_quick_start() -> None:
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [
        line.removeprefix(".venv/bin/")
        for line in quick_start.splitlines()
        if line.startswith(".venv/bin/pytest")
    ]
    assert commands == ["pytest", "pytest application"]
    script = (ROOT / ".ci" / "run").read_text()
    for command in commands:
        assert re.search(rf"^{re.escape(command)}$", script, re.MULTILINE), command


def test_ci_installs_the_browser_and_requires_the_browser_tests_to_run() -> None:
    """The console's browser tests skip for a user without chromium; in CI a skip would hide
    them, so .ci/run installs chromium and its driver and sets the variable that turns the skip
    into a failure (the one the test reads), before the first pytest."""
    script = (ROOT / ".ci" / "run").read_text()
    test = (ROOT / "tests" / "e2e" / "test_console_browser.py").read_text()
    assert 'os.environ.get("WEBHOOK_INBOX_REQUIRE_BROWSER") == "1"' in test
    assert re.search(r"apt-get install -y -q chromium chromium-driver$", script, re.MULTILINE)
    required = script.index("export WEBHOOK_INBOX_REQUIRE_BROWSER=1")
    assert required < script.index("\npytest\n")
    assert script.index("\nensure_browser\n") < script.index("\npytest\n")
