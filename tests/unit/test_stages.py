"""The runtime is grouped by stage, and the imports keep to the layout (docs/design.md, "Code map").

- The package's top level holds only the shared base (a few modules) and the stage folders.
- The shared base imports only the shared base; the store imports the base; a stage (ingest,
  processing, maintenance, operations, deploy) imports the base, the store's public modules and
  its own modules, and another stage only through the modules that stage lists in its
  ``__all__``.
- Each function's entry point imports the base, the store and its own stage.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.infra_support import PACKAGE_DIR, ROOT

BASE = {
    "__init__",
    "aws",
    "backoff",
    "config",
    "deadlines",
    "idle_ledger",
    "errors",
    "network",
    "observability",
    "settings",
    "wakeups",
}
STORE = "store"
STAGES = {"ingest", "processing", "maintenance", "operations", "deploy"}
# Each function's own stage: the migrations custom resource runs the store's migrations.
ENTRY_STAGE = {
    "ingest": "ingest",
    "processor": "processing",
    "sweeper": "maintenance",
    "migrations": "deploy",
    "database_protection": "deploy",
    "database_log_groups": "deploy",
    "idle_ledger_cleanup": "deploy",
    "operator": "operations",
}


def _package_of(module: str) -> str:
    """``webhook_inbox.store.inbox`` → ``store``; a top-level module → ``base``."""
    parts = module.split(".")
    if len(parts) >= 3 or (len(parts) == 2 and (PACKAGE_DIR / parts[1]).is_dir()):
        return parts[1]
    return "base"


def _is_module(dotted: str) -> bool:
    path = PACKAGE_DIR.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(source: str) -> Iterator[str]:
    """Every ``webhook_inbox`` module ``source`` imports (lazy imports included), a name taken
    from a package counted as the submodule it is."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("webhook_inbox."))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == (
            "webhook_inbox"
        ):
            module = node.module or ""
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                yield candidate if _is_module(candidate) else module


def _public(package: str) -> set[str]:
    tree = ast.parse((PACKAGE_DIR / package / "__init__.py").read_text())
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{package}/__init__.py declares no __all__")


def violations(owner: str, imports: Iterable[str]) -> list[str]:
    """The imports a module of package ``owner`` (``base``, ``store`` or a stage) may not make."""
    wrong = []
    for module in imports:
        target = _package_of(module)
        leaf = module.split(".")[2] if module.count(".") >= 2 else ""
        if target in {owner, "base"}:
            continue
        if owner in {"base", STORE}:
            wrong.append(f"{owner} imports {module}: it may import only the shared base")
        elif target not in STAGES | {STORE} or leaf not in _public(target):
            wrong.append(f"{owner} reaches into {target}'s internals: {module}")
    return wrong


def _runtime() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR)
        yield ("base" if len(relative.parts) == 1 else relative.parts[0]), path


def test_the_top_level_holds_only_the_shared_base_and_the_stage_folders() -> None:
    modules = {p.stem for p in PACKAGE_DIR.glob("*.py")}
    folders = {p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert modules == BASE
    assert folders == STAGES | {STORE}


def test_every_module_keeps_to_its_stage() -> None:
    wrong = []
    for owner, path in _runtime():
        for problem in violations(owner, imported_modules(path.read_text())):
            wrong.append(f"{path.relative_to(ROOT)}: {problem}")
    assert wrong == []


@pytest.mark.parametrize("function", sorted(ENTRY_STAGE))
def test_each_entry_point_imports_its_own_stage_the_store_and_the_base(function: str) -> None:
    source = (ROOT / "functions" / function / "app.py").read_text()
    reached = {_package_of(m) for m in imported_modules(source)}
    assert reached <= {"base", STORE, ENTRY_STAGE[function]}, reached
    assert ENTRY_STAGE[function] in reached | {"deploy"}


def test_every_stage_declares_what_others_may_import() -> None:
    for package in STAGES | {STORE}:
        for name in _public(package):
            assert _is_module(f"webhook_inbox.{package}.{name}"), (package, name)


@pytest.mark.parametrize(
    ("owner", "module", "allowed"),
    [
        ("maintenance", "webhook_inbox.ingest.provider_registry", True),  # public
        ("maintenance", "webhook_inbox.ingest.provider_source", False),  # internal
        ("ingest", "webhook_inbox.processing.passes", False),
        ("processing", "webhook_inbox.store.inbox", True),
        ("processing", "webhook_inbox.store.inbox_rows", False),  # the store's internal
        ("store", "webhook_inbox.ingest.providers", False),  # upward
        ("base", "webhook_inbox.store.db", False),
        ("base", "webhook_inbox.errors", True),
        ("ingest", "webhook_inbox.ingest.schemes.base", True),  # its own
        ("operations", "webhook_inbox.store.inbox", True),
        ("maintenance", "webhook_inbox.operations.actions", False),  # operations has no public
        ("operations", "webhook_inbox.processing.batch", False),
    ],
)
def test_the_rule_itself(owner: str, module: str, allowed: bool) -> None:
    """The checker refuses what the layout forbids: without this, a rule that never fires
    would pass the test above."""
    assert (violations(owner, [module]) == []) is allowed
