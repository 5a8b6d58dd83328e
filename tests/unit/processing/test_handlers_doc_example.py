"""The handler example in docs/handlers.md passes the project's own mypy settings (strict), so a
user who copies it into application/ keeps `make lint` green (issue 29)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

PAGE = ROOT / "docs" / "handlers.md"
_BLOCK = re.compile(r"```python\n(# application/webhook_inbox_app/(\w+)\.py.*?)```", re.DOTALL)


def _examples() -> dict[str, str]:
    return {name: code for code, name in _BLOCK.findall(PAGE.read_text())}


def test_the_page_shows_a_handler_and_its_registration() -> None:
    examples = _examples()
    assert set(examples) == {"billing", "handlers"}
    assert '("stripe", "invoice.paid"): billing.invoice_paid' in examples["handlers"]


def test_the_handler_example_passes_strict_mypy(tmp_path: Path) -> None:
    module = tmp_path / "billing.py"
    module.write_text(_examples()["billing"])
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(module)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
