"""docs/design.md's "Code map" stays true to the tree.

- Its table names every runtime module (each ``.py`` under ``layers/shared/webhook_inbox/`` and
  each ``functions/*/app.py``) and no module that does not exist.
- Each call chain's steps exist, each is named in the step before it (or, after a step that only
  runs the callable it was handed, in the one before that), the stated hop count is the number of
  arrows, and the statement it ends on is in the named SQL file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.infra_support import PACKAGE_DIR, ROOT
from webhook_inbox.store.queries import parse

DESIGN = ROOT / "docs" / "design.md"
_ROW = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)
_CHAIN = re.compile(r"^- \*\*(?P<path>[^*]+)\*\* \((?P<hops>\d+) hops[^)]*\): (?P<rest>.+)$")
_TICKED = re.compile(r"`([^`]+)`")


def _section(title: str, level: str) -> str:
    text = DESIGN.read_text("utf-8")
    start = text.index(f"\n{level} {title}\n")
    end = text.find(f"\n{level} ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _runtime_modules() -> set[str]:
    layer = {str(p.relative_to(ROOT)) for p in PACKAGE_DIR.rglob("*.py")}
    functions = {str(p.relative_to(ROOT)) for p in (ROOT / "functions").glob("*/app.py")}
    return layer | functions


def test_the_code_map_names_every_runtime_module_and_nothing_else() -> None:
    mapped = _ROW.findall(_section("Code map", "##"))
    assert len(mapped) == len(set(mapped)), "a module is named twice"
    runtime = _runtime_modules()
    assert sorted(runtime - set(mapped)) == [], "runtime modules missing from the code map"
    assert sorted(set(mapped) - runtime) == [], "the code map names modules that do not exist"


def _file(step_file: str) -> Path:
    if step_file.startswith(("functions/", "tools/")):
        return ROOT / step_file
    return PACKAGE_DIR / step_file


def _function(path: Path, qualname: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = ast.parse(path.read_text("utf-8")).body
    *owners, name = qualname.split(".")
    for owner in owners:
        scope = next(n.body for n in scope if isinstance(n, ast.ClassDef) and n.name == owner)
    return next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)


def _named_in(function: ast.FunctionDef) -> set[str]:
    """Every name a function's body mentions: called, or handed over as a callable."""
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def _chains() -> list[re.Match[str]]:
    lines = _section("Call chains", "###").splitlines()
    chains = [m for line in lines if (m := _CHAIN.match(line))]
    assert len(chains) >= 6
    return chains


def test_each_call_chain_exists_step_by_step() -> None:
    for chain in _chains():
        path = chain["path"]
        steps_text, statement_text = chain["rest"].split("; statement ", 1)
        steps = [tuple(s.rsplit(":", 1)) for s in _TICKED.findall(steps_text)]
        assert int(chain["hops"]) == len(steps) - 1, f"{path}: hop count"
        bodies = []
        for step_file, qualname in steps:
            try:
                bodies.append(_function(_file(step_file), qualname))
            except (StopIteration, FileNotFoundError):
                raise AssertionError(f"{path}: no {step_file}:{qualname}") from None
        for index, (_, qualname) in enumerate(steps[1:], start=1):
            callers = bodies[max(0, index - 2) : index]
            name = qualname.split(".")[-1]
            assert any(name in _named_in(c) for c in callers), f"{path}: who calls {qualname}?"
        sql_file, statement = _TICKED.findall(statement_text)[0].rsplit(":", 1)
        sql_path = ROOT / sql_file if sql_file.startswith("tools/") else PACKAGE_DIR / sql_file
        assert statement in parse(sql_path.read_text("utf-8")), f"{path}: no {statement}"
        last = bodies[-1]
        assert statement in {c.value for c in ast.walk(last) if isinstance(c, ast.Constant)}, (
            f"{path}: {qualname} does not run {statement}"
        )
