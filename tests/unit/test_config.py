import ast
import dataclasses
from pathlib import Path

import pytest

from tests.infra_support import PACKAGE_DIR, ROOT
from webhook_inbox.config import env_int, env_number, load, setting, variables
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


# Reading a variable outside a settings class would escape the template comparison
# (tests/unit/infra/test_template_consistency.py): only these may, each for its reason.
DIRECT_READERS = {
    "layers/shared/webhook_inbox/config.py": "builds the settings objects",
    "layers/shared/webhook_inbox/providers.py": "a provider secret may name a variable of its "
    "own ({'env': NAME}, from PROVIDERS_CONFIG); registry() is the tools' way in",
}
_DIRECT = {"env", "env_int", "env_number", "ENVIRONMENT"}


def _reads_variables_directly(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        imported = (
            isinstance(node, ast.ImportFrom)
            and node.module == "webhook_inbox.config"
            and bool({a.name for a in node.names} & _DIRECT)
        )
        attribute = (
            isinstance(node, ast.Attribute)
            and node.attr in _DIRECT
            and isinstance(node.value, ast.Name)
            and node.value.id == "config"
        )
        if imported or attribute:
            return True
    return False


def test_variables_are_read_through_settings_objects_only() -> None:
    sources = [*sorted(PACKAGE_DIR.rglob("*.py")), *sorted((ROOT / "functions").rglob("app.py"))]
    readers = {str(p.relative_to(ROOT)) for p in sources if _reads_variables_directly(p)}
    assert readers == set(DIRECT_READERS) - {"layers/shared/webhook_inbox/config.py"}


def test_a_settings_object_parses_each_field_by_its_default() -> None:
    @dataclasses.dataclass(frozen=True)
    class Example:
        count: int = setting("X_COUNT", 3)
        seconds: float = setting("X_SECONDS", 1.0)
        flag: bool = setting("X_FLAG", False)
        name: str = setting("X_NAME", "default")
        optional: str = setting("X_OPTIONAL", "")
        tuning: int = 7  # not a setting: never read

    assert load(Example, {}) == Example()
    assert variables(Example) == {
        "count": "X_COUNT",
        "seconds": "X_SECONDS",
        "flag": "X_FLAG",
        "name": "X_NAME",
        "optional": "X_OPTIONAL",
    }
    environ = {
        "X_COUNT": "12",
        "X_SECONDS": "1.5",
        "X_FLAG": "True",
        "X_NAME": " q ",
        "X_OPTIONAL": "  ",
        "TUNING": "9",
    }
    assert load(Example, environ) == Example(12, 1.5, True, "q", "", 7)
    with pytest.raises(ConfigurationError, match="X_COUNT must be a whole number"):
        load(Example, {"X_COUNT": "1.5"})
