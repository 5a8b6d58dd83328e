"""Driving `webhook-inbox dev` as a user does: a real process group, real sockets, signals."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.integration.cli.conftest import CONSOLE_SCRIPT


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment minus anything that would point the command at another stack."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "PROVIDERS_CONFIG", "PROVIDERS_CONFIG_FILE"}
        and not k.startswith("AWS_")
    }
    env.update(extra or {})
    return env


# Every working folder a DevProcess made, removed at the session's end (tests/conftest.py).
MADE_FOLDERS: list[Path] = []


class DevProcess:
    def __init__(
        self, *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        # Its own working folder: the command writes its operator environment file there.
        self._own_folder = cwd is None
        self.cwd = cwd or Path(tempfile.mkdtemp(prefix="webhook-inbox-dev-e2e-"))
        if self._own_folder:
            MADE_FOLDERS.append(self.cwd)
        self.proc = subprocess.Popen(
            [str(CONSOLE_SCRIPT), "dev", "--port", "0", "--sweep-every", "1",
             "--visibility-timeout", "2", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=clean_env(env),
            cwd=self.cwd,
            start_new_session=True,  # its own process group, like a terminal job
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.transcript: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def remove_folder(self) -> None:
        """The working folder this made, once the process has stopped."""
        if self._own_folder:
            shutil.rmtree(self.cwd, ignore_errors=True)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.transcript.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.transcript))

    def mentioned(self, pattern: str) -> list[str]:
        """The first group of every line so far that matches ``pattern`` (read or not)."""
        while True:
            try:
                self.transcript.append(self.lines.get_nowait())
            except queue.Empty:
                break
        return [m[1] for line in self.transcript if (m := re.search(pattern, line))]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll the state a test is about to assert (never a console line standing in for it: the
    console may print an effect before the commit that makes it true)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def session_processes(session_id: int) -> list[str]:
    """Every live process whose session is ``session_id`` (the dev command and its children)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[3]) == session_id and fields[0] != "Z":
            found.append(text.split(" ", 2)[:2][1])
    return found


def processes_mentioning(fragment: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in text:
            found.append(text)
    return found


def post(url: str, headers: dict[str, str], body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - a loopback http URL built here
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code
