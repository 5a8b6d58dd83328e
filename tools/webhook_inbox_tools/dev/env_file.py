"""`.webhook-inbox-dev.env`: what a running `webhook-inbox dev` tells other shells.

``dev`` writes it at start-up and removes it on exit. Loaded into a shell (``set -a; . FILE;
set +a``) it points every operator command at the stack; ``trigger``, ``sign`` and ``send``
also read it from the current folder by themselves, so that they sign for the providers ``dev``
serves and send where it listens without the shell having loaded anything.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

DEFAULT_ENV_FILE = ".webhook-inbox-dev.env"
# The variables naming what dev serves (its URL, its providers) as opposed to how to reach its
# database and queues.
URL_VARIABLE = "WEBHOOK_INBOX_URL"

_OWNER = re.compile(r"^# written by webhook-inbox dev, pid (\d+)$", re.MULTILINE)


def write_env_file(path: Path, env: dict[str, str]) -> None:
    lines = [
        "# webhook-inbox dev: the environment for operator commands against the running stack.",
        f"# Load it in another shell:  set -a; . {shlex.quote(str(path))}; set +a",
        f"# written by webhook-inbox dev, pid {os.getpid()}",
    ]
    lines += [f"{name}={shlex.quote(value)}" for name, value in env.items()]
    # 0600: PROVIDERS_CONFIG may inline the dev secrets dev serves.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")


def running_owner(path: Path) -> int | None:
    """The pid of another webhook-inbox dev, still running, that wrote the env file ``path``."""
    try:
        match = _OWNER.search(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    pid = int(match[1]) if match else 0
    if pid in {0, os.getpid()}:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # left behind by a dev that was killed: ours to replace
    except PermissionError:
        pass  # alive, another user's
    return pid


def running_dev_environment(path: Path = Path(DEFAULT_ENV_FILE)) -> dict[str, str]:
    """The variables in ``path`` if a running dev wrote it, else nothing (a file left by a dev
    that was killed points at a stack that is gone)."""
    if running_owner(path) is None:
        return {}
    found = {}
    for line in path.read_text("utf-8").splitlines():
        name, equals, value = line.partition("=")
        if equals and not line.startswith("#") and name.isidentifier():
            words = shlex.split(value)
            found[name] = words[0] if words else ""
    return found


def cli_name() -> str:
    """This command as the user ran it (``.venv/bin/webhook-inbox``, or the path the shell
    found on PATH), so that a command dev prints runs as printed from the same folder."""
    invoked = sys.argv[0] if sys.argv else ""
    return shlex.quote(invoked) if Path(invoked).name == "webhook-inbox" else "webhook-inbox"
