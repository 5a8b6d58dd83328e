"""A key GitHub never sends (its types are `issues.<action>`), beside one it does."""

from __future__ import annotations

from typing import Any

from webhook_inbox.processing.domain import Handler


def note_issue(conn: Any, event: Any) -> None:
    """Writes nothing: the key is what is under test."""


HANDLERS: dict[tuple[str, str], Handler] = {
    ("github", "issues"): note_issue,
    ("github", "issues.opened"): note_issue,
}
