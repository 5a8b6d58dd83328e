"""Start the function's fresh interpreter, feed it the invocation, collect its answer.

Built artifacts run under ``python -I -S`` with an explicit ``sys.path`` (the function's build
directory, then its layers' ``python/`` folders, as Lambda mounts them at /var/task and /opt),
so no site-packages and no source tree can be imported. The source tree runs under ``-I`` only:
its dependencies come from the environment the command runs in.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.find_python import PythonNotFound, find_python
from webhook_inbox_tools.local_invoke import child

EXIT_OK, EXIT_FUNCTION_ERROR, EXIT_TIMEOUT = (
    child.EXIT_OK,
    child.EXIT_FUNCTION_ERROR,
    child.EXIT_TIMEOUT,
)
# Lambda gives the init phase (imports) up to 10 s of its own; the watchdog in the child ends
# the invocation at the timeout, this margin only catches a child that cannot even do that.
INIT_LIMIT_S = 10.0
KILL_MARGIN_S = 5.0
# What the Lambda Python runtime itself provides beside the standard library.
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")
MACHINES = {"arm64": {"aarch64", "arm64"}, "x86_64": {"x86_64", "amd64"}}


@dataclass(frozen=True)
class Invocation:
    interpreter: tuple[str, ...]
    path: tuple[Path, ...]
    task_root: Path
    environment: dict[str, str]
    spec: dict[str, Any]  # handler, event, timeout, memory_mb, names: see child.py
    timeout: float


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    answer: str  # the handler's JSON result, or Lambda's error document


def build_paths(
    build_dir: Path, function_id: str, layer_ids: tuple[str, ...], runtime: str
) -> list[Path]:
    """The function's build folder, then each layer's python folders as Lambda mounts them."""
    task_root = build_dir / function_id
    if not task_root.is_dir():
        raise ConfigurationError(
            f"no build of {function_id} in {build_dir}: run `sam build` (or pass --source)"
        )
    paths = [task_root]
    # Layers are extracted into /opt in order, a later one overwriting an earlier one.
    for layer_id in reversed(layer_ids):
        site = build_dir / layer_id / "python"
        if not site.is_dir():
            raise ConfigurationError(
                f"no build of layer {layer_id} in {build_dir}: run `sam build`"
            )
        nested = site / "lib" / runtime
        paths += [p for p in (nested / "site-packages", site) if p.is_dir()]
    return paths


def runtime_interpreter(runtime: str) -> str:
    """A Python of the function's runtime version (the build's bytecode is for that version), as
    an absolute path: the child runs with a cleaned environment, where a pyenv shim exits 127."""
    try:
        return find_python(runtime.removeprefix("python"))
    except PythonNotFound as exc:
        raise ConfigurationError(f"the build is for {runtime}: {exc}") from None


def architecture_note(architectures: tuple[str, ...]) -> str | None:
    wanted = architectures[0] if architectures else "x86_64"
    here = platform.machine().lower()
    if here in MACHINES.get(wanted, {wanted}):
        return None
    return (
        f"note: the build is for {wanted} and this machine is {here}: native modules in it "
        "cannot load here (psycopg then falls back to its pure-Python implementation over "
        "this machine's libpq)"
    )


@contextmanager
def runtime_packages(invocation: Invocation) -> Iterator[list[Path]]:
    """boto3 and its dependencies as the Lambda runtime provides them, when no layer ships them
    (built artifacts only: the source tree runs with this environment's packages anyway).

    Linked one package at a time into a folder of their own, so nothing else from this
    environment's site-packages becomes importable.
    """
    isolated = "-S" in invocation.interpreter
    if not isolated or any((p / "boto3").is_dir() for p in invocation.path):
        yield []
        return
    with tempfile.TemporaryDirectory(prefix="webhook-inbox-runtime-") as folder:
        for name in RUNTIME_PACKAGES:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                raise ConfigurationError(
                    f"{name} (which Lambda's runtime provides) is not installed"
                )
            origin = Path(spec.origin)
            source = origin.parent if origin.name == "__init__.py" else origin
            (Path(folder) / source.name).symlink_to(source)
        yield [Path(folder)]


def run(invocation: Invocation) -> Outcome:
    """One invocation; the child's stderr (the function's logs) goes straight to ours."""
    spec = {
        **invocation.spec,
        "path": [str(p) for p in invocation.path],
        "task_root": str(invocation.task_root),
        "timeout": invocation.timeout,
    }
    source = Path(child.__file__).read_text("utf-8")
    process = subprocess.Popen(  # noqa: S603 - our interpreter and our own child source
        [*invocation.interpreter, "-c", source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=invocation.environment,
        cwd=invocation.task_root,
        start_new_session=True,  # so a kill reaches whatever the function started too
    )
    try:
        answer, _ = process.communicate(
            json.dumps(spec).encode(), timeout=invocation.timeout + INIT_LIMIT_S + KILL_MARGIN_S
        )
    except subprocess.TimeoutExpired:
        _kill(process)
        message = f"Task timed out after {invocation.timeout:.2f} seconds (process killed)"
        return Outcome(
            EXIT_TIMEOUT, json.dumps({"errorMessage": message, "errorType": "Sandbox.Timedout"})
        )
    except BaseException:  # Ctrl-C included: never leave the function running behind us
        _kill(process)
        raise
    code = process.returncode
    if code < 0 or not answer:
        how = f"signal {-code}" if code < 0 else f"status {code}"
        error = {
            "errorMessage": f"the function's process ended with {how}",
            "errorType": "Runtime.ExitError",
        }
        return Outcome(EXIT_FUNCTION_ERROR, json.dumps(error))
    return Outcome(code, answer.decode("utf-8"))


def _kill(process: subprocess.Popen[bytes]) -> None:
    with suppress(ProcessLookupError):  # it ended on its own meanwhile
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
