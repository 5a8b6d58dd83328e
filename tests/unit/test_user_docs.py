"""The user documentation describes the product as it is: no issue numbers, no commit hashes.

README.md, RELIABILITY.md, infra/RUNBOOK.md and docs/*.md are read by people running the
product, for whom "issue 24" or "at commit 2c53ad1" means nothing. How the product got where it
is (what was wrong, which change fixed it) belongs in CHANGELOG.md; a measurement against an
older tree names that tree by what it is, not by its commit.
"""

from __future__ import annotations

import re

from tests.support import ROOT

USER_DOCS = [
    ROOT / "README.md",
    ROOT / "RELIABILITY.md",
    ROOT / "infra" / "RUNBOOK.md",
    *sorted((ROOT / "docs").glob("*.md")),
]

# A commit hash: 7 to 40 hex characters with a digit, and a letter unless it is the short form.
_HASH = r"<?`?(?=[0-9a-f]*[0-9])(?:(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}|[0-9]{7})\b"

HISTORY = {
    "issue reference": re.compile(r"\b[Ii]ssues? #?\d+"),
    "commit hash": re.compile(rf"\bcommits?\s+{_HASH}"),
    "'at commit'": re.compile(r"\bat commit\b", re.IGNORECASE),
    "commit hash as a baseline": re.compile(
        rf"\b(?:at|by|against|before|after|between|and|on|merged at)\s+{_HASH}"
    ),
}


def test_user_docs_carry_no_project_history() -> None:
    found = [
        f"{page.relative_to(ROOT)}:{number}: {what}: {match.group(0)!r}"
        for page in USER_DOCS
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        for what, pattern in HISTORY.items()
        if (match := pattern.search(line))
    ]
    assert not found, "history in the user docs (move it to CHANGELOG.md):\n" + "\n".join(found)


def test_the_check_catches_what_it_should() -> None:
    caught = [
        "fixed in issue 24",
        "(Issue 27)",
        "issues #4236",
        "the tree before these cuts (commit 80d9dea)",
        "a4ee881 at commit",
        "measured against 5276659 in one run",
        "merged at dfac759",
    ]
    clean = [
        "`openssl genpkey -algorithm ed25519`",
        "the claim commits before the reply is sent",
        "webhook-inbox events show github 72d3162e-cc78-…",
        "https://github.com/aws/aws-sam-cli/issues/4236",
    ]
    assert [t for t in caught if not any(p.search(t) for p in HISTORY.values())] == []
    assert [t for t in clean if any(p.search(t) for p in HISTORY.values())] == []
