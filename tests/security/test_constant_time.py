"""Every signature comparison in the library is constant-time.

An AST scan of ``layers/shared/webhook_inbox``: no ``==`` / ``!=`` / ``in`` comparison touches a
name that holds a signature, digest or MAC; every scheme's ``verify`` decides through an approved
helper: ``any_match``/``match_index`` (HMAC digests, ``hmac.compare_digest`` and nothing else)
or ``verified_index`` (public-key signatures, the library's ``verify``), each of which checks
every candidate without stopping at the first match.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import ROOT
from webhook_inbox.ingest import schemes

PACKAGE = ROOT / "layers" / "shared" / "webhook_inbox"
SENSITIVE = re.compile(r"signature|digest|(^|_)mac($|_)|hmac|expected|presented|secret", re.I)
# Comparisons on these names are not of signature bytes (each with the reason).
NOT_SIGNATURE_BYTES = {
    # body_sha256 is the stored body digest: a dedup fact, not an authenticator.
    "body_sha256",
    # secret_check's module name: the sweeper compares an AWS error code with its constants.
    "secret_check",
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
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Call)
                and isinstance(func.value.func, ast.Name)
                and func.value.func.id == "super"
            ):
                called.add(f"super().{func.attr}")
    return called


# The approved decision points: HMAC digests through hmac.compare_digest (base.py), public-key
# signatures through the library's verify (public_keys.py); each checks every candidate pair.
# The schemes call them through their module (base.match_index); base.py calls its own bare.
APPROVED = {
    "any_match",
    "match_index",
    "verified_index",
    "base.any_match",
    "base.match_index",
    "public_keys.verified_index",
    # Certificate senders (certificates.py): the one certificate the delivery names by URL,
    # through the library's verify; nothing secret is compared (a public key, a public signature).
    "self.verify_with_certificate",
    # Token senders (jose.py): one key per token (the kid's, or the x5c leaf), through the
    # library's verify; nothing secret is compared.
    "jose.verify",
    "jose.verify_with",
    # App Store: each JWS through its x5c leaf (app_store.py's _decode, which calls
    # jose.verify_with after the chain to Apple's root is checked).
    "self._decode",
    # Handing a signed delivery to the parent's verify, which this test checks in its own class
    # (Asana's, which first lets an unsigned handshake through when accept_handshake is on).
    "super().verify",
}


def _returns_inside_a_loop(function: ast.FunctionDef) -> bool:
    loops = [n for n in ast.walk(function) if isinstance(n, ast.For | ast.While)]
    return any(isinstance(n, ast.Return) for loop in loops for n in ast.walk(loop))


def _verifiers_that_skip_the_approved_helpers(trees: list[ast.Module]) -> list[str]:
    verifiers = {
        node.name: node
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name != "Scheme" and "verify" in _functions(node)
    }
    return [
        name
        for name, node in verifiers.items()
        if not _calls(_functions(node)["verify"]) & APPROVED
    ]


def _scheme_trees() -> list[ast.Module]:
    return [
        ast.parse(path.read_text())
        for path in sorted((PACKAGE / "ingest" / "schemes").glob("*.py"))
    ]


def test_the_approved_helpers_compare_in_constant_time_and_check_every_pair() -> None:
    base = _functions(ast.parse((PACKAGE / "ingest" / "schemes" / "base.py").read_text()))
    assert "hmac.compare_digest" in _calls(base["match_index"])
    assert "match_index" in _calls(base["any_match"])
    public = _functions(ast.parse((PACKAGE / "ingest" / "schemes" / "public_keys.py").read_text()))
    assert "loaded.verify" in _calls(public["verified_index"])
    handled = {
        ast.unparse(handler.type)
        for handler in ast.walk(public["verified_index"])
        if isinstance(handler, ast.ExceptHandler) and handler.type is not None
    }
    assert handled == {"InvalidSignature"}  # a bad signature, and nothing else, is a miss
    for helper in (base["match_index"], public["verified_index"]):
        assert not _returns_inside_a_loop(helper), f"{helper.name} stops at the first match"


def test_the_certificate_helper_decides_through_the_library_and_only_on_a_bad_signature() -> None:
    found = _functions(ast.parse((PACKAGE / "ingest" / "schemes" / "certificates.py").read_text()))
    assert "verify_rsa" in _calls(found["verify_with_certificate"])
    assert "key.verify" in _calls(found["verify_rsa"])
    handled = {
        ast.unparse(handler.type)
        for handler in ast.walk(found["verify_rsa"])
        if isinstance(handler, ast.ExceptHandler) and handler.type is not None
    }
    # A bad signature is a miss; a certificate that does not parse is a 401, nothing else.
    assert handled == {"InvalidSignature", "ValueError"}


def test_every_scheme_decides_through_an_approved_helper() -> None:
    trees = _scheme_trees()
    assert _verifiers_that_skip_the_approved_helpers(trees) == []
    # ...and every registered scheme verifies with one of them (presets inherit GenericHmac's).
    verifiers = {
        node.name
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and "verify" in _functions(node)
    }
    assert len(schemes.SCHEMES) >= 8
    for scheme in schemes.SCHEMES.values():
        owner = next(cls for cls in scheme.__mro__ if "verify" in vars(cls))
        assert owner.__name__ in verifiers, f"{scheme.name} verifies with {owner.__name__}"


def test_the_scan_catches_a_verify_that_decides_on_its_own() -> None:
    planted = ast.parse(
        "class Planted(Scheme):\n"
        "    def verify(self, delivery, secrets, *, now, tolerance):\n"
        "        key.verify(signature, delivery.body)\n"
    )
    assert _verifiers_that_skip_the_approved_helpers([planted]) == ["Planted"]
    early = ast.parse(
        "def verified_index(keys, message, signatures):\n"
        "    for index, key in enumerate(keys):\n"
        "        return index\n"
    )
    assert _returns_inside_a_loop(_functions(early)["verified_index"])
