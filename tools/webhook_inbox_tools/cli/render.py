"""Output for the CLI: plain-text tables (coloured only on a terminal), JSON, ages, progress."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from webhook_inbox import config
from webhook_inbox.operations import commands

_COLOURS = {
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
    "dim": "2",
    "bold": "1",
}
STATUS_COLOURS = {
    "received": "cyan",
    "processing": "blue",
    "processed": "green",
    "failed": "yellow",
    "dead_letter": "red",
    "ignored": "dim",
    "pending": "yellow",
    "published": "green",
    "dead": "red",
    "replayed": "green",
    "retried": "green",
    "would_replay": "cyan",
    "would_retry": "cyan",
    "refused": "red",
    "not_found": "red",
}


def colour_enabled(stream: TextIO) -> bool:
    """Colours only for a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    if config.env("NO_COLOR"):
        return False
    if config.env("TERM") == "dumb":
        return False
    return stream.isatty()


def paint(text: str, colour: str | None, *, enabled: bool) -> str:
    if not enabled or not colour or colour not in _COLOURS:
        return text
    return f"\033[{_COLOURS[colour]}m{text}\033[0m"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    stream: TextIO | None = None,
    colour_column: str | None = None,
) -> None:
    """Print aligned columns; ``colour_column`` names a column coloured by its status value."""
    out = stream or sys.stdout
    enabled = colour_enabled(out)
    cells = [[cell_text(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    colour_at = headers.index(colour_column) if colour_column in headers else -1
    print(
        paint(
            "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
            "bold",
            enabled=enabled,
        ),
        file=out,
    )
    for row in cells:
        parts = []
        for i, (cell, width) in enumerate(zip(row, widths, strict=True)):
            padded = cell.ljust(width)
            if i == colour_at:
                padded = paint(padded, STATUS_COLOURS.get(cell), enabled=enabled)
            parts.append(padded)
        print("  ".join(parts).rstrip(), file=out)


def cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    return text.replace("\n", " ")


def truncate(text: str | None, width: int) -> str | None:
    if text is None or len(text) <= width:
        return text
    return text[: width - 1] + "…"


def timestamp(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def age(since: datetime | None, *, now: datetime | None = None) -> str:
    """A short human age: 42s, 3m05s, 2h10m, 4d03h."""
    if since is None:
        return "-"
    seconds = int(((now or datetime.now(UTC)) - since).total_seconds())
    if seconds < 0:
        return f"in {age(datetime.now(UTC), now=datetime.now(UTC) + timedelta(seconds=-seconds))}"
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def to_json(value: Any) -> str:
    return json.dumps(value, default=commands.json_default, indent=2, sort_keys=False)


def print_json(value: Any) -> None:
    print(to_json(value))


def revive_times(value: Any) -> Any:
    """JSON as an operator command's answer carries it, with each ``…_at`` field's ISO 8601
    text back as a datetime (what the tables print and age)."""
    if isinstance(value, list):
        return [revive_times(v) for v in value]
    if not isinstance(value, dict):
        return value
    return {
        key: _time(inner) if key.endswith("_at") else revive_times(inner)
        for key, inner in value.items()
    }


def _time(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return value  # not a time after all: shown as it is


class Progress:
    """A one-line progress bar on stderr, drawn only on a terminal and only for long sets."""

    def __init__(self, label: str, *, threshold: int = 20) -> None:
        self.total = 0
        self.done = 0
        self.label = label
        self.threshold = threshold
        self.enabled = False
        self._last_draw = 0.0

    def update(self, done: int, total: int) -> None:
        """``done`` of ``total`` rows (an action's progress callback)."""
        if not self.total:
            self.enabled = total >= self.threshold and sys.stderr.isatty()
        self.done, self.total = done, total
        now = time.monotonic()
        if self.enabled and (now - self._last_draw > 0.1 or self.done == self.total):
            self._last_draw = now
            width = 30
            filled = width * self.done // max(self.total, 1)
            bar = "#" * filled + "." * (width - filled)
            sys.stderr.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
