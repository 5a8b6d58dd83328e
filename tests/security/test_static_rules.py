"""The security lint stays on: ruff's ``S`` rules (flake8-bandit) are selected for the whole
project, and no per-file ignore switches them off for shipped code (functions/, layers/).
CI runs ``ruff check .``, so a finding fails the build."""

from __future__ import annotations

import tomllib

from tests.support import ROOT


def test_ruff_bandit_rules_cover_all_shipped_code() -> None:
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    assert "S" in lint["select"]
    assert not [rule for rule in lint.get("ignore", []) if rule.startswith("S")]
    for pattern, rules in lint.get("per-file-ignores", {}).items():
        if pattern.startswith(("functions", "layers")) or pattern in {"*", "**", "**/*.py"}:
            assert not [rule for rule in rules if rule.startswith("S")], pattern
