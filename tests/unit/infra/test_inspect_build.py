"""infra/inspect_build.py, the check CI runs after `sam build`, on small fake layers (issue 15)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.infra_support import ROOT

EM_X86_64 = 0x3E
EM_AARCH64 = 0xB7


def load_inspector() -> ModuleType:
    spec = importlib.util.spec_from_file_location("inspect_build", ROOT / "infra/inspect_build.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


inspect_build = load_inspector()


def elf(machine: int) -> bytes:
    return b"\x7fELF" + bytes(14) + machine.to_bytes(2, "little") + bytes(16)


def dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nx")


def test_a_layer_version_other_than_the_tested_one_fails(tmp_path: Path) -> None:
    """The old build resolved psycopg-binary 3.2.x for the layer while CI tested 3.3.x."""
    dist(tmp_path, "psycopg-binary", "3.2.13")
    dist(tmp_path, "boto3", "1.44.8")
    layer = inspect_build.layer_distributions(tmp_path)
    assert layer == {"psycopg-binary": "3.2.13", "boto3": "1.44.8"}
    problems = inspect_build.check_versions(layer, {"psycopg-binary": "3.3.9", "boto3": "1.44.8"})
    assert problems == ["layer ships psycopg-binary 3.2.13, the tests ran with 3.3.9"]


def test_a_distribution_the_tests_never_had_fails(tmp_path: Path) -> None:
    dist(tmp_path, "six", "1.17.0")
    problems = inspect_build.check_versions(inspect_build.layer_distributions(tmp_path), {})
    assert problems == ["layer ships six 1.17.0, which the tests never imported"]


def test_matching_versions_pass_against_a_real_interpreter(tmp_path: Path) -> None:
    import psycopg

    dist(tmp_path, "psycopg", psycopg.__version__)
    tested = inspect_build.environment_distributions(sys.executable)
    assert inspect_build.check_versions(inspect_build.layer_distributions(tmp_path), tested) == []


def test_every_elf_file_must_be_aarch64_whatever_its_name(tmp_path: Path) -> None:
    """Wheels vendor libraries as name.so.5 (psycopg_binary.libs/libpq…so.5): not only *.so."""
    (tmp_path / "webhook_inbox").mkdir()
    (tmp_path / "psycopg_binary").mkdir()
    (tmp_path / "psycopg_binary" / "_psycopg.cpython-313-aarch64-linux-gnu.so").write_bytes(
        elf(EM_AARCH64)
    )
    (tmp_path / "psycopg_binary.libs").mkdir()
    (tmp_path / "psycopg_binary.libs" / "libpq-1a2b.so.5.17").write_bytes(elf(EM_X86_64))
    problems = inspect_build.check_layer(tmp_path)
    assert problems == ["psycopg_binary.libs/libpq-1a2b.so.5.17 is not an arm64 (aarch64) binary"]
