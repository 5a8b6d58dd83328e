"""What `webhook-inbox dev` watches for edits: your application's package and the providers file.

Polled, not notified: a stat of a few dozen files every half second costs nothing next to the
functions, needs no dependency, and sees edits made through any editor, mount or container.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

APPLICATION_PACKAGE = "webhook_inbox_app"
# Python modules, the application's SQL (named queries, migrations) and its data files.
WATCHED_SUFFIXES = frozenset({".py", ".sql", ".json", ".toml"})

_Stamp = tuple[int, int]  # (mtime in ns, size): an edit that keeps the size still moves mtime


def application_folder() -> Path | None:
    """Where the functions will import your application from (the same lookup they make)."""
    spec = importlib.util.find_spec(APPLICATION_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


class SourceWatcher:
    """Snapshots files under folders (recursively) and single files; reports what changed."""

    def __init__(self, folders: Iterable[Path], files: Iterable[Path]) -> None:
        self._folders = [f.resolve() for f in folders]
        self._files = [f.resolve() for f in files]
        self._seen = self._snapshot()

    @property
    def watched(self) -> list[Path]:
        return [*self._folders, *self._files]

    def _snapshot(self) -> dict[Path, _Stamp]:
        paths: list[Path] = list(self._files)
        for folder in self._folders:
            paths += [
                p
                for p in folder.rglob("*")
                if p.suffix in WATCHED_SUFFIXES and "__pycache__" not in p.parts
            ]
        stamps: dict[Path, _Stamp] = {}
        for path in paths:
            try:
                stat = path.stat()
            except OSError:
                continue  # removed between the listing and the stat: absent, as it now is
            stamps[path] = (stat.st_mtime_ns, stat.st_size)
        return stamps

    def changed(self) -> list[Path]:
        """Files added, removed or modified since the last call (sorted; empty if none)."""
        now = self._snapshot()
        before, self._seen = self._seen, now
        return sorted(p for p in now.keys() | before.keys() if now.get(p) != before.get(p))
