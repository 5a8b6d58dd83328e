"""The build inspection refuses a runtime layer that carries tools or application code."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from tests.infra_support import ROOT


def _inspect_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inspect_build", ROOT / "infra/inspect_build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(tmp_path: Path, *packages: str) -> Path:
    for name in packages:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    return tmp_path


def test_the_tools_package_is_not_runtime() -> None:
    assert "webhook_inbox_tools" in _inspect_build().not_runtime_packages()
    assert "webhook_inbox" not in _inspect_build().not_runtime_packages()


def test_a_layer_with_the_tools_package_fails(tmp_path: Path) -> None:
    site = _site(tmp_path, "webhook_inbox", "webhook_inbox_tools", "psycopg")
    problems = _inspect_build().foreign_modules(site)
    assert len(problems) == 1
    assert problems[0].startswith("webhook_inbox_tools ")


def test_a_runtime_only_layer_passes(tmp_path: Path) -> None:
    assert _inspect_build().foreign_modules(_site(tmp_path, "webhook_inbox", "psycopg")) == []


def _runtime_copy(site: Path) -> Path:
    """The repository's runtime package, copied into a fake layer (sources only)."""
    source = ROOT / "layers" / "shared" / "webhook_inbox"
    for module in source.rglob("*.py"):
        if "__pycache__" in module.parts:
            continue
        target = site / "webhook_inbox" / module.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")
    return site


def test_a_copy_of_the_runtime_package_passes(tmp_path: Path) -> None:
    assert _inspect_build().foreign_modules(_runtime_copy(tmp_path)) == []


def test_tools_or_application_code_nested_in_the_runtime_package_fails(tmp_path: Path) -> None:
    # The layout before the move: the CLI, the dev stack and the examples inside webhook_inbox.
    site = _runtime_copy(tmp_path)
    (site / "webhook_inbox" / "cli").mkdir()
    (site / "webhook_inbox" / "cli" / "__init__.py").write_text("")
    (site / "webhook_inbox" / "examples.py").write_text("")
    problems = _inspect_build().foreign_modules(site)
    assert sorted(problems) == [
        "webhook_inbox/cli/__init__.py is not a module of the runtime package "
        "(layers/shared/webhook_inbox): it must not ship in the runtime layer",
        "webhook_inbox/examples.py is not a module of the runtime package "
        "(layers/shared/webhook_inbox): it must not ship in the runtime layer",
    ]
