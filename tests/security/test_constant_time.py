"""Every signature comparison in the library is constant-time.

An AST scan of ``layers/shared/webhook_inbox``: no ``==`` / ``!=`` / ``in`` comparison touches a
name that holds a signature, digest or MAC; every scheme's ``verify`` decides through
``_any_match``, which compares with ``hmac.compare_digest`` and nothing else.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import ROOT
from webhook_inbox import schemes

PACKAGE = ROOT / "layers" / "shared" / "webhook_inbox"
SENSITIVE = re.compile(r"signature|digest|(^|_)mac($|_)|hmac|expected|presented|secret", re.I)
# Comparisons on these names are not of signature bytes (each with the reason).
NOT_SIGNATURE_BYTES = {
    # body_sha256 is the stored body digest: a dedup fact, not an authenticator.
    "body_sha256",
}


def _names(node: ast.AST) -> set[str]:
    found = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            found.add(child.id)
        elif isinstance(child, ast.Attribute):
            found.add(child.attr)
        elif isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
            found.add(child.func.attr)
    return found


def _sensitive_comparisons(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        if not any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            continue
        # Comparing a length or a type is not comparing the bytes.
        operands = [node.left, *node.comparators]
        if any(
            isinstance(o, ast.Call)
            and isinstance(o.func, ast.Name)
            and o.func.id in {"len", "type"}
            for o in operands
        ):
            continue
        if any(isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands):
            # "v1" == version, "t" == key: comparing a parsed label with a literal.
            continue
        names = {n for o in operands for n in _names(o)} - NOT_SIGNATURE_BYTES
        if any(SENSITIVE.search(n) for n in names):
            hits.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return hits


def test_no_signature_digest_or_mac_is_compared_with_equality_operators() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 10  # the scan really sees the package
    hits = [hit for path in sources for hit in _sensitive_comparisons(path)]
    assert hits == []


def test_the_scan_catches_a_plain_signature_comparison(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def verify(expected, presented_signature):\n"
        "    return expected == presented_signature\n"
        "def other(mac, digest):\n"
        "    return digest != mac.digest()\n"
    )
    assert len(_sensitive_comparisons(planted)) == 2


def _functions(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _calls(node: ast.AST) -> set[str]:
    called = set()
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            func = child.func
            if isinstance(func, ast.Name):
                called.add(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                called.add(f"{func.value.id}.{func.attr}")
    return called


def test_every_scheme_decides_through_hmac_compare_digest() -> None:
    base = _functions(ast.parse((PACKAGE / "schemes" / "base.py").read_text()))
    assert "hmac.compare_digest" in _calls(base["_match_index"])
    assert "_match_index" in _calls(base["_any_match"])
    # Every class that implements verify, in any scheme module, decides through one of them...
    trees = [ast.parse(path.read_text()) for path in sorted((PACKAGE / "schemes").glob("*.py"))]
    verifiers = {
        node.name: node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name != "Scheme" and "verify" in _functions(node)
    }
    for name, node in verifiers.items():
        decides = _calls(_functions(node)["verify"]) & {"_any_match", "_match_index"}
        assert decides, f"{name}.verify skips them"
    # ...and every registered scheme verifies with one of them (presets inherit GenericHmac's).
    assert len(schemes.SCHEMES) >= 6
    for scheme in schemes.SCHEMES.values():
        owner = next(cls for cls in scheme.__mro__ if "verify" in vars(cls))
        assert owner.__name__ in verifiers, f"{scheme.name} verifies with {owner.__name__}"
