import ast
import dataclasses
from pathlib import Path

import pytest

from tests.infra_support import PACKAGE_DIR, ROOT
from tests.support import FIXTURE_APPLICATION
from webhook_inbox import config
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


# Every module that may read configuration: the runtime (layer, functions, application) and
# the tools. Each reads the environment through webhook_inbox.config only.
_CONFIGURED_CODE = (
    PACKAGE_DIR,
    ROOT / "functions",
    FIXTURE_APPLICATION,
    ROOT / "tools" / "webhook_inbox_tools",
)
# Run by the Makefile with the system python before any virtualenv exists: standard library only.
STANDALONE_READERS = {
    "tools/webhook_inbox_tools/find_python.py": "PYENV_ROOT, before a venv",
    "tools/webhook_inbox_tools/testing/plugin.py": "WEBHOOK_INBOX_TEST_SERVER, in the user's "
    "pytest session (never DATABASE_URL)",
}
_ENVIRON_WRITES = {"update"}  # os.environ.update(...): a child process's environment


def _configured_modules() -> list[Path]:
    return [path for top in _CONFIGURED_CODE for path in sorted(top.rglob("*.py"))]


def _environment_reads(path: Path) -> list[int]:
    """Lines that read ``os.environ`` / ``os.getenv`` / ``from os import environ``; writing to it
    (``os.environ.update(...)``, ``os.environ[k] = v``) is no read."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in {"environ", "getenv", "putenv"}
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ):
            parent = parents.get(node)
            written = node.attr == "environ" and (
                (isinstance(parent, ast.Attribute) and parent.attr in _ENVIRON_WRITES)
                or (isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store))
            )
            if not written:
                lines.append(node.lineno)
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and {a.name for a in node.names} & {"environ", "getenv"}
        ):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_the_config_module_reads_the_environment() -> None:
    readers = {
        str(p.relative_to(ROOT)): lines
        for p in _configured_modules()
        if (lines := _environment_reads(p))
    }
    assert set(readers) == {"layers/shared/webhook_inbox/config.py", *STANDALONE_READERS}, readers


def test_the_environment_scan_sees_reads_and_lets_writes_pass(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nos.environ.update({'A': '1'})\nos.environ['B'] = '2'\n"
        "x = os.environ.get('C')\ny = os.getenv('D')\nz = dict(os.environ)\n"
    )
    assert _environment_reads(module) == [4, 5, 6]


def _declarations(path: Path) -> list[str]:
    """The variables ``setting("NAME", default)`` declares in a module."""
    return [
        node.args[0].value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "setting")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "setting")
        )
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def test_every_variable_is_declared_once() -> None:
    declared: dict[str, list[str]] = {}
    for path in _configured_modules():
        for variable in _declarations(path):
            declared.setdefault(variable, []).append(str(path.relative_to(ROOT)))
    assert declared, "no setting(...) found: the scan is broken"
    twice = {variable: where for variable, where in declared.items() if len(where) > 1}
    assert twice == {}
    homes = {where[0] for where in declared.values()}
    assert homes == {"layers/shared/webhook_inbox/settings.py"}  # one home for every setting


# Reading a variable outside a settings class would escape the template comparison
# (tests/unit/infra/test_template_consistency.py): only these may, each for its reason.
DIRECT_READERS = {
    "layers/shared/webhook_inbox/config.py": "builds the settings objects",
    "layers/shared/webhook_inbox/ingest/providers.py": "a provider secret may name a variable "
    "of its own ({'env': NAME}, from PROVIDERS_CONFIG); registry() is the tools' way in",
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Cached:
    count: int = setting("WEBHOOK_INBOX_TEST_COUNT", 1)


def test_settings_are_read_once_until_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_INBOX_TEST_COUNT", "2")
    first = config.current(_Cached)
    monkeypatch.setenv("WEBHOOK_INBOX_TEST_COUNT", "3")
    assert config.current(_Cached) is first
    assert first.count == 2
    config.reset()
    assert config.current(_Cached).count == 3


def test_settings_put_in_place_are_current_until_reset() -> None:
    config.use(_Cached(count=9))
    assert config.current(_Cached).count == 9
    config.reset()
    assert config.current(_Cached).count == 1


def test_unset_is_the_empty_string_never_none() -> None:
    with pytest.raises(TypeError, match="not None"):
        setting("X_OPTIONAL", None)
