"""Find a real interpreter of one Python version, as an absolute path that runs in any environment.

pyenv puts a shim named ``python3.13`` on PATH for every version it has, but a shim runs only while
that version is selected (``PYENV_VERSION``, a ``.python-version`` file): handed to a child with a
cleaned environment — ``webhook-inbox invoke`` runs the function that way, as Lambda would — it
exits 127. So a candidate counts only through the path it reports for itself (``sys.executable``),
and pyenv's own installs are tried when no shim answers.

Standard library only: the Makefile and infra/check-template.sh run this file as a script before
any virtualenv exists (``python3 tools/webhook_inbox_tools/find_python.py 3.13``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# The base interpreter, not a virtualenv's: what runs the function must not see any site-packages,
# and `python -m venv` and sam build want the installation itself.
_PROBE = (
    "import sys; print(getattr(sys, '_base_executable', sys.executable)); "
    "print('%d.%d' % sys.version_info[:2])"
)
_VERSION = re.compile(r"^3\.\d+$")


class PythonNotFound(LookupError):
    """No interpreter of the version runs here; the message lists what was tried and why."""


def _pyenv_installs(version: str) -> list[Path]:
    """pyenv's installs of ``version`` (3.13 → versions/3.13.x), newest patch release first."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installs = [
        p / "bin" / f"python{version}"
        for p in (root / "versions").glob(f"{version}.*")
        if re.fullmatch(rf"{re.escape(version)}\.\d+", p.name)
    ]
    return sorted(installs, key=lambda p: int(p.parent.parent.name.rsplit(".", 1)[1]), reverse=True)


def _candidates(version: str) -> list[str]:
    found = shutil.which(f"python{version}")
    listed = [found] if found else []
    return listed + [str(p) for p in _pyenv_installs(version)]


def _probe(candidate: str, version: str) -> tuple[str | None, str]:
    """The interpreter's own absolute path if it runs and is ``version``, else why not."""
    try:
        result = subprocess.run(  # noqa: S603 - an interpreter we found, with a fixed probe
            [candidate, "-c", _PROBE], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"does not start ({exc.__class__.__name__})"
    lines = result.stdout.split()
    if result.returncode != 0 or len(lines) != 2:
        return None, f"exit status {result.returncode}"
    executable, reported = lines
    if reported != version:
        return None, f"is Python {reported}"
    return str(Path(executable).resolve()), ""


def find_python(version: str) -> str:
    """An absolute path to a Python ``version`` (e.g. ``"3.13"``) that runs with no environment."""
    if not _VERSION.match(version):
        raise ValueError(f"not a Python version: {version!r} (expected e.g. 3.13)")
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return str(Path(getattr(sys, "_base_executable", sys.executable)).resolve())
    return search_installed(version)


def search_installed(version: str) -> str:
    """``python{version}`` on PATH, then pyenv's installs: the first that really runs."""
    tried: list[str] = []
    for candidate in _candidates(version):
        found, why = _probe(candidate, version)
        if found:
            return found
        tried.append(f"{candidate} ({why})")
    where = "; ".join(tried) if tried else "nothing on PATH, no pyenv install"
    raise PythonNotFound(
        f"no Python {version} found (tried python{version} on PATH and pyenv's versions/"
        f"{version}.*: {where}): install Python {version} (e.g. `pyenv install {version}`)"
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: find_python.py VERSION   (e.g. 3.13)", file=sys.stderr)
        return 2
    try:
        print(find_python(argv[0]))
    except (PythonNotFound, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
