"""The layer is resolved from a lock for the runtime's real platform (issue 15)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "shared"
PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)")


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (LAYER / "requirements.lock").read_text().splitlines():
        if match := PIN.match(line):
            pins[match[1].lower().replace("_", "-")] = match[2]
    return pins


def test_every_locked_distribution_is_pinned_with_hashes() -> None:
    entries = re.split(r"\n(?=[A-Za-z])", (LAYER / "requirements.lock").read_text())
    pinned = [entry for entry in entries if PIN.match(entry)]
    assert len(pinned) == len(lock_pins()) >= 5
    for entry in pinned:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]


def test_the_lock_satisfies_the_declared_runtime_dependencies() -> None:
    pins = lock_pins()
    for line in (LAYER / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            assert requirement.specifier.contains(pins[requirement.name.lower()]), line
    # psycopg[binary] must bring the compiled implementation, at the same version
    assert pins["psycopg-binary"] == pins["psycopg"]


def test_the_layer_installs_the_lock_for_al2023_aarch64() -> None:
    """python3.13 Lambda runs on Amazon Linux 2023 (glibc 2.34): every manylinux tag up to
    2_34 fits, and psycopg-binary 3.3 exists for aarch64 only as manylinux_2_28."""
    dry_run = subprocess.run(
        ["make", "-n", "-C", str(LAYER), "build-SharedLayer", "ARTIFACTS_DIR=/nonexistent"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.replace("\\\n", " ")
    (install,) = [line for line in dry_run.splitlines() if "pip install" in line]
    platforms = set(re.findall(r"--platform (\S+)", install))
    assert {
        "manylinux_2_28_aarch64",
        "manylinux_2_34_aarch64",
        "manylinux2014_aarch64",
    } <= platforms
    assert not any(re.match(r"manylinux_2_(3[5-9]|[4-9]\d)_", p) for p in platforms), platforms
    assert all(p.endswith("_aarch64") for p in platforms)
    assert "--require-hashes" in install
    assert install.rstrip().endswith('requirements.lock"')


def test_the_development_constraints_are_the_lock_without_hashes() -> None:
    constraints = {}
    for line in (LAYER / "constraints.txt").read_text().splitlines():
        if match := PIN.match(line):
            constraints[match[1].lower().replace("_", "-")] = match[2]
    assert constraints == lock_pins()
