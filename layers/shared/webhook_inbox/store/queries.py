"""Named SQL queries, loaded from the ``sql/*.sql`` files beside this module.

Each file holds blocks introduced by a ``-- name: <query_name>`` line; the block runs to the next
such line. Keeping SQL in files makes every statement findable and reviewable in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from psycopg import sql

from webhook_inbox.errors import ConfigurationError

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """Split a .sql file into ``{name: statement}``."""
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ConfigurationError(f"query {name!r} is defined twice")
        queries[name] = body.strip()
    return queries


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
        return sql.SQL(_file(package, group)[name])
    except KeyError:
        raise ConfigurationError(f"no query {name!r} in {package}/sql/{group}.sql") from None


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
