"""`.ci/run` stops on every failing check (set -e does not see a failure left of `&&`)."""

from __future__ import annotations

import re

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
