"""Apply the numbered SQL migrations in ``migrations/``.

Safe to run twice (applied versions are recorded) and safe when several runners start at once
(a transaction-scoped advisory lock serialises them; the loser waits, then finds nothing to do).
An applied migration whose file has since changed is an error, never silently skipped.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from webhook_inbox.db import translate
from webhook_inbox.errors import MigrationError

# Arbitrary constant shared by every runner: the advisory lock's key ("webhook-inbox").
_LOCK_KEY = 0x7765_6268_6F6F_6B
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
RUNTIME_PACKAGE = "webhook_inbox"


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available_migrations(package: str = RUNTIME_PACKAGE) -> list[Migration]:
    """The ``migrations/`` of ``package``: the runtime's, or an application's (whose versions
    are recorded as ``<package>:NNNN`` so they never collide with the runtime's)."""
    prefix = "" if package == RUNTIME_PACKAGE else f"{package}:"
    found = []
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(prefix + match[1], match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {versions}")
    return found


def migrate(conn: psycopg.Connection[Any], *, package: str = RUNTIME_PACKAGE) -> list[str]:
    """Bring ``package``'s schema up to date in one transaction; return the versions applied now.

    Run it for the runtime first, then for the application (its tables may refer to ours).
    """
    applied_now: list[str] = []
    with translate(), conn.transaction():
        # DDL on a large table may legitimately outlast the application's statement timeout.
        conn.execute("SET LOCAL statement_timeout = 0")
        conn.execute("SET LOCAL lock_timeout = 0")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        rows = conn.execute("SELECT version, checksum FROM schema_migrations").fetchall()
        recorded = dict(rows)
        for migration in available_migrations(package):
            if migration.version in recorded:
                if recorded[migration.version] != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version}_{migration.name} was changed after it "
                        "was applied; add a new migration instead of editing an applied one"
                    )
                continue
            conn.execute(sql.SQL(migration.sql))
            conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
            applied_now.append(migration.version)
    return applied_now


def applied_versions(conn: psycopg.Connection[Any]) -> list[str]:
    with translate():
        exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return []
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
