"""Named SQL queries, loaded from the ``sql/*.sql`` files beside this module.

Each file holds blocks introduced by a ``-- name: <query_name>`` line; the block runs to the next
such line. Keeping SQL in files makes every statement findable and reviewable in one place.

The files explain each statement in ``--`` comments; :func:`query` sends it without them
(:func:`without_comments`). The comments are for readers: sent, they made the lease statement
longer than psycopg's 4096-byte cache of parsed statements (so psycopg parsed it again on every
batch) and cost the server their parse on every call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from psycopg import sql

from webhook_inbox.errors import ConfigurationError

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
# What may follow a `$` in a dollar quote's tag ($$ or $tag$); a `$` after an identifier
# character (a parameter $1, a name like a$b) opens none.
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
_IDENTIFIER_CHAR = re.compile(r"[A-Za-z0-9_$]")


def parse(text: str) -> dict[str, str]:
    """Split a .sql file into ``{name: statement}``."""
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ConfigurationError(f"query {name!r} is defined twice")
        queries[name] = body.strip()
    return queries


def without_comments(statement: str) -> str:
    """``statement`` without its ``--`` comments; a line that held nothing else goes with them.

    A ``--`` inside a string literal ('…', E'…'), a quoted identifier ("…") or a dollar-quoted
    body ($$…$$, $tag$…$tag$) is not a comment and stays, as does everything else inside them;
    block comments (/* … */) stay too (none of the project's statements has one). The lines
    kept are unchanged, so an error position the server reports points into familiar text.
    """
    out: list[str] = []
    line_start, blank = 0, True  # where the current line begins in ``out``; only spaces so far
    i, end = 0, len(statement)
    while i < end:
        ch = statement[i]
        if ch == "-" and statement.startswith("--", i):
            newline = statement.find("\n", i)
            if newline < 0:
                i = end
            elif blank:  # the comment is the line's only content: drop the line
                del out[line_start:]
                i = newline + 1
            else:
                i = newline
            continue
        if ch in "'\"":
            close = _closing_quote(statement, i, ch)
        elif ch == "$" and (i == 0 or not _IDENTIFIER_CHAR.match(statement[i - 1])):
            close = _closing_dollar(statement, i)
        elif ch == "/" and statement.startswith("/*", i):
            close = _closing_block_comment(statement, i)
        else:
            close = i + 1
        out.append(statement[i:close])
        if ch == "\n":
            line_start, blank = len(out), True
        elif not ch.isspace():
            blank = False
        i = close
    return "".join(out).strip()


def _closing_quote(text: str, start: int, quote: str) -> int:
    """Where the literal or quoted identifier opened at ``start`` ends (just past its closing
    quote; a doubled quote is part of it, and a backslash escapes in an E'…' literal)."""
    escapes = (
        quote == "'"
        and start > 0
        and text[start - 1] in "eE"
        and (start == 1 or not _IDENTIFIER_CHAR.match(text[start - 2]))
    )
    i, end = start + 1, len(text)
    while i < end:
        ch = text[i]
        if escapes and ch == "\\":
            i += 2
        elif ch == quote:
            if text.startswith(quote, i + 1):
                i += 2
            else:
                return i + 1
        else:
            i += 1
    return end


def _closing_block_comment(text: str, start: int) -> int:
    """Where the block comment opened at ``start`` ends (PostgreSQL's nest)."""
    depth, i = 1, start + 2
    while depth:
        opens, closes = text.find("/*", i), text.find("*/", i)
        if closes < 0:
            return len(text)
        if 0 <= opens < closes:
            depth, i = depth + 1, opens + 2
        else:
            depth, i = depth - 1, closes + 2
    return i


def _closing_dollar(text: str, start: int) -> int:
    """Where the dollar-quoted body opened at ``start`` ends (just past its closing tag); just
    past the ``$`` when none opens there (a parameter such as $1)."""
    tag = _DOLLAR_TAG.match(text, start)
    if tag is None:
        return start + 1
    close = text.find(tag.group(), tag.end())
    return len(text) if close < 0 else close + len(tag.group())


@cache
def _file(package: str, group: str) -> dict[str, str]:
    text = resources.files(package).joinpath("sql", f"{group}.sql").read_text("utf-8")
    return parse(text)


@cache
def query(group: str, name: str, *, package: str = "webhook_inbox.store") -> sql.SQL:
    """The statement ``name`` from ``<package>/sql/<group>.sql``, ready for ``cursor.execute``.

    ``package`` lets the tools and the application keep their SQL beside their own modules.
    """
    try:
        text = _file(package, group)[name]
    except KeyError:
        raise ConfigurationError(f"no query {name!r} in {package}/sql/{group}.sql") from None
    return sql.SQL(without_comments(text))


@dataclass(frozen=True)
class SqlFile:
    """One ``sql/<group>.sql`` file: ``SqlFile("inbox").statement("claim_events")``.

    Each data module binds its file once (``_statement = SqlFile("inbox").statement``) so every
    call site names only the statement.
    """

    group: str
    package: str = "webhook_inbox.store"

    def statement(self, name: str) -> sql.SQL:
        return query(self.group, name, package=self.package)
