"""Check what `sam build` produced, beyond "it built" (stdlib only; run by infra/check-template.sh).

- The layer ships bytecode for the runtime's Python (cpython-313) next to every module, in
  unchecked-hash mode, so nothing is compiled at cold start on Lambda's read-only file system.
- Every compiled file in it (extension modules and the shared libraries wheels vendor, such as
  psycopg_binary.libs/libpq.so.5) is aarch64, the functions' architecture.
- Every distribution in it has the version installed in the environment the tests ran in
  (--test-python), so the layer ships what CI tested.
- It holds the runtime package only: no tools package (CLI, dev stack, operator actions) and no
  application package (your handlers ship in their own layer), whatever the Makefile copies;
  its webhook_inbox holds no module that layers/shared/webhook_inbox lacks.
- Function packages carry only their own entry point: every dependency comes from the layer once.
- Everything fits Lambda's 250 MB unzipped limit for a function plus its layers.

Usage: python infra/inspect_build.py .aws-sam/build --test-python .venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

LAYER = "SharedLayer"
APPLICATION_LAYER = "ApplicationLayer"
FUNCTIONS = (
    "IngestFunction",
    "ProcessorFunction",
    "SweeperFunction",
    "MigrationsFunction",
    "DatabaseLogGroupsFunction",
    "DatabaseProtectionFunction",
)
UNZIPPED_LIMIT_BYTES = 250 * 1024 * 1024
ELF_MACHINE_AARCH64 = 0xB7
PYC_FLAG_HASH_BASED = 0b01
PYC_FLAG_CHECK_SOURCE = 0b10


ROOT = Path(__file__).resolve().parent.parent
# Top-level folders whose packages must never reach the runtime layer.
NOT_RUNTIME_HOMES = (ROOT / "tools", ROOT / "application")
RUNTIME_SOURCE = ROOT / "layers" / "shared" / "webhook_inbox"


def not_runtime_packages() -> set[str]:
    """The import names the tools and the application folders define (packages and modules)."""
    names = set()
    for home in NOT_RUNTIME_HOMES:
        if not home.is_dir():
            continue
        for entry in home.iterdir():
            if (entry / "__init__.py").is_file():
                names.add(entry.name)
            elif entry.suffix == ".py":
                names.add(entry.stem)
    return names


def _python_sources(package: Path) -> set[Path]:
    return {p.relative_to(package) for p in package.rglob("*.py") if "__pycache__" not in p.parts}


def foreign_modules(site: Path) -> list[str]:
    """Problems for every tools or application module found in the runtime layer: a top-level
    package of theirs, or any module inside ``webhook_inbox`` that the runtime's source does not
    have (before the move, the CLI, the dev stack and the examples lived in there)."""
    forbidden = not_runtime_packages()
    problems = [
        f"{entry.name} is a tools or application module: it must not ship in the runtime layer"
        for entry in sorted(site.iterdir())
        if entry.name in forbidden or entry.stem in forbidden
    ]
    package = site / "webhook_inbox"
    if package.is_dir():
        extra = _python_sources(package) - _python_sources(RUNTIME_SOURCE)
        problems += [
            f"webhook_inbox/{path.as_posix()} is not a module of the runtime package "
            "(layers/shared/webhook_inbox): it must not ship in the runtime layer"
            for path in sorted(extra)
        ]
    return problems


def size_of(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def check_layer(site: Path) -> list[str]:
    problems = []
    package = site / "webhook_inbox"
    if not package.is_dir():
        return [f"{package} is missing"]
    problems += foreign_modules(site)
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    for source in sources:
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc"
        if not pyc.is_file():
            problems.append(f"no cpython-313 bytecode for {source.relative_to(site)}")
            continue
        flags = int.from_bytes(pyc.read_bytes()[4:8], "little")
        if not flags & PYC_FLAG_HASH_BASED or flags & PYC_FLAG_CHECK_SOURCE:
            problems.append(f"{pyc.relative_to(site)} is not unchecked-hash bytecode")
    native = native_binaries(site)
    if not any(lib.suffix == ".so" for lib in native):
        problems.append("no native extension found (psycopg_binary should bring some)")
    for lib, machine in native.items():
        if machine != ELF_MACHINE_AARCH64:
            problems.append(f"{lib.relative_to(site)} is not an arm64 (aarch64) binary")
    print(
        f"layer: {len(sources)} modules, all with cpython-313 unchecked-hash bytecode; "
        f"{len(native)} native binaries; {size_of(site) / 1e6:.1f} MB unzipped"
    )
    return problems


def native_binaries(site: Path) -> dict[Path, int]:
    """Every ELF file under ``site`` (whatever its name: vendored libraries end in .so.5 and
    the like) and its machine type."""
    found = {}
    for path in site.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                header = handle.read(20)
            if header[:4] == b"\x7fELF":
                found[path] = int.from_bytes(header[18:20], "little")
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def layer_distributions(site: Path) -> dict[str, str]:
    """Name -> version of every distribution installed in the layer (its .dist-info)."""
    found = {}
    for metadata in site.glob("*.dist-info/METADATA"):
        fields = dict(
            line.split(": ", 1)
            for line in metadata.read_text(errors="replace").split("\n\n", 1)[0].splitlines()
            if ": " in line
        )
        found[canonical(fields["Name"])] = fields["Version"]
    return found


def environment_distributions(python: str) -> dict[str, str]:
    """Name -> version of every distribution installed for that interpreter."""
    probe = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    result = subprocess.run(  # noqa: S603 - the interpreter CI ran the tests with
        [python, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    )
    return {canonical(name): version for name, version in json.loads(result.stdout).items()}


def check_versions(layer: dict[str, str], tested: dict[str, str]) -> list[str]:
    problems = []
    for name, version in sorted(layer.items()):
        if name not in tested:
            problems.append(f"layer ships {name} {version}, which the tests never imported")
        elif tested[name] != version:
            problems.append(f"layer ships {name} {version}, the tests ran with {tested[name]}")
    if not layer:
        problems.append("no distributions found in the layer")
    elif not problems:
        print(f"layer: {len(layer)} distributions, each the version the tests ran with")
    return problems


def check_application_layer(site: Path) -> list[str]:
    """Your handlers' layer: the application package, compiled, and no copy of the runtime."""
    problems = []
    if not (site / "webhook_inbox_app").is_dir():
        problems.append(f"{site / 'webhook_inbox_app'} is missing")
    if (site / "webhook_inbox").exists():
        problems.append("the application layer carries a copy of the runtime package")
    for source in (p for p in site.rglob("*.py") if "__pycache__" not in p.parts):
        if not (source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc").is_file():
            problems.append(f"no cpython-313 bytecode for {source.relative_to(site)}")
    return problems


def check_function(root: Path) -> list[str]:
    problems = []
    if not (root / "app.py").is_file():
        problems.append(f"{root.name}: app.py is missing")
    extra = [p.name for p in root.iterdir() if p.name not in {"app.py", "__pycache__"}]
    if extra:
        problems.append(f"{root.name}: carries more than its entry point: {sorted(extra)}")
    return problems


def main(build_dir: str, test_python: str) -> int:
    build = Path(build_dir)
    site = build / LAYER / "python"
    problems = check_layer(site)
    problems += check_versions(layer_distributions(site), environment_distributions(test_python))
    problems += check_application_layer(build / APPLICATION_LAYER / "python")
    layer_bytes = size_of(build / LAYER) + size_of(build / APPLICATION_LAYER)
    for name in FUNCTIONS:
        problems += check_function(build / name)
        total = layer_bytes + size_of(build / name)
        if total > UNZIPPED_LIMIT_BYTES:
            problems.append(f"{name} with its layer is {total / 1e6:.0f} MB unzipped (limit 250)")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    if not problems:
        print(f"functions: {', '.join(FUNCTIONS)} carry only app.py")
    return 1 if problems else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir", nargs="?", default=".aws-sam/build")
    parser.add_argument(
        "--test-python", required=True, help="interpreter of the environment the tests ran in"
    )
    args = parser.parse_args()
    sys.exit(main(args.build_dir, args.test_python))
