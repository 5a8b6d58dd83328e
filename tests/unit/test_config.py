import ast
from pathlib import Path

import pytest

from tests.infra_support import PACKAGE_DIR, ROOT
from webhook_inbox.config import env_int, env_number
from webhook_inbox.errors import ConfigurationError


def test_unset_or_blank_means_the_default() -> None:
    assert env_int("X", 7, {}) == 7
    assert env_number("X", 2.5, {"X": "  "}) == 2.5


def test_values_are_parsed() -> None:
    assert env_int("X", 7, {"X": " 12 "}) == 12
    assert env_number("X", 1, {"X": "0.25"}) == 0.25


@pytest.mark.parametrize(
    ("raw", "message"),
    [("ten", "X must be a whole number, got 'ten'"), ("1.5", "whole number"), ("0", "positive")],
)
def test_bad_integers_are_refused_by_name(raw: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        env_int("X", 7, {"X": raw})


@pytest.mark.parametrize("raw", ["nan", "-1", "0", "soon"])
def test_bad_numbers_are_refused_by_name(raw: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^X must be"):
        env_number("X", 1, {"X": raw})


def test_os_environ_is_the_default_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_INBOX_TEST_SETTING", "3")
    assert env_int("WEBHOOK_INBOX_TEST_SETTING", 1) == 3


def _reads_the_environment(path: Path) -> bool:
    """``os.environ`` / ``os.getenv`` / ``from os import environ`` anywhere in the module."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in {"environ", "getenv", "putenv"}
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and {a.name for a in node.names} & {"environ", "getenv"}
        ):
            return True
    return False


def test_only_the_config_module_reads_the_environment() -> None:
    sources = [*sorted(PACKAGE_DIR.rglob("*.py")), *sorted((ROOT / "functions").rglob("app.py"))]
    readers = [str(p.relative_to(ROOT)) for p in sources if _reads_the_environment(p)]
    assert readers == ["layers/shared/webhook_inbox/config.py"]
