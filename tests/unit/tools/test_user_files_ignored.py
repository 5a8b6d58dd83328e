"""The files README.md and docs/ ask a user to create in the checkout are ignored by git, so
following them never leaves a dirty tree (or a committed secret) behind (issue 29)."""

from __future__ import annotations

import re
import subprocess

from tests.support import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `> body.json`, `--sam-env-vars env.json`, `--providers my-providers.json`, "save this as `x`"
_CREATED = re.compile(
    r"(?:>\s*|--sam-env-vars\s+|--providers\s+|save this as `)([A-Za-z0-9_.-]+\.json)\b"
)


def _files_users_create() -> set[str]:
    names: set[str] = set()
    for page in PAGES:
        names.update(_CREATED.findall(page.read_text()))
    return names


def test_the_pages_ask_for_the_files_this_test_knows() -> None:
    # If this fails, the pattern above stopped matching the docs: the test would check nothing.
    assert {"providers.json", "body.json", "delivery.json", "env.json"} <= _files_users_create()


def test_every_file_a_user_is_asked_to_create_is_ignored() -> None:
    names = sorted(_files_users_create())
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(names) + "\n",
        capture_output=True,
        text=True,
        check=False,
    )
    ignored = set(result.stdout.split())
    assert [n for n in names if n not in ignored] == []
