import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


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
