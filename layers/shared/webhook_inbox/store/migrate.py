"""Apply the numbered SQL migrations in ``migrations/``.

Safe to run twice (applied versions are recorded) and safe when several runners start at once
(a session advisory lock serialises them; the loser waits, then finds nothing to do).

Migrations must not stop the application's writes. Each one runs with a short ``lock_timeout``:
a migration that has to wait for a busy table gives up quickly instead of queueing every writer
behind its lock request, and is tried again a bounded number of times. Each migration is its own
transaction, so a long run never holds the locks of the first migration until the last commits.

A file whose first lines carry ``-- migrate:no-transaction`` runs statement by statement in
autocommit (``CREATE INDEX CONCURRENTLY`` cannot run in a transaction). Its statements end with
``;`` at the end of a line, and each must be safe to run again (``IF [NOT] EXISTS``): a failure
half-way leaves the earlier statements applied and the next run starts from the first.

An applied migration whose file has since changed is an error, never silently skipped, unless
the new file names the old content's checksum with ``-- migrate:supersedes <sha256>``: a
reviewed edit that reaches the same schema by a less disruptive path (docs/design.md, "Schema
and migrations"; 0001 so gave the example tables to the application's own migrations).
The recorded checksum is left as it was, so the previous release still accepts the database.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from webhook_inbox.errors import MigrationError
from webhook_inbox.store.store_errors import translate

# Arbitrary constant shared by every runner: the advisory lock's key ("webhook-inbox").
_LOCK_KEY = 0x7765_6268_6F6F_6B
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
RUNTIME_PACKAGE = "webhook_inbox.store"  # its migrations/ folder
_NO_TRANSACTION = re.compile(r"^-- migrate:no-transaction\s*$", re.MULTILINE)
_SUPERSEDES = re.compile(r"^-- migrate:supersedes ([0-9a-f]{64})\s*$", re.MULTILINE)
_STATEMENT_END = re.compile(r";[ \t]*$", re.MULTILINE)

# How long one attempt may wait for a table lock, and how many attempts a migration gets.
DEFAULT_LOCK_TIMEOUT_MS = 3000
DEFAULT_LOCK_ATTEMPTS = 5
_LOCK_POLL_S = 0.2


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def transactional(self) -> bool:
        return _NO_TRANSACTION.search(self.sql) is None

    @property
    def supersedes(self) -> frozenset[str]:
        """Checksums of earlier contents of this file that a database may have recorded."""
        return frozenset(_SUPERSEDES.findall(self.sql))

    def statements(self) -> list[str]:
        """The file split at each ``;`` that ends a line (for no-transaction migrations)."""
        parts = _STATEMENT_END.split(self.sql)
        return [p.strip() for p in parts if not _only_comments(p)]


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("--") for line in text.splitlines())


@dataclass(frozen=True)
class Limits:
    """How a run waits: per-attempt lock wait, attempts, and an optional overall deadline."""

    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    lock_attempts: int = DEFAULT_LOCK_ATTEMPTS
    deadline: float | None = None  # time.monotonic() by which every statement must have ended

    def statement_timeout_ms(self) -> int:
        """0 (none) without a deadline: an index build on a big table may take long."""
        if self.deadline is None:
            return 0
        left = int((self.deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise MigrationError("out of time before the migration could start")
        return left


def available_migrations(package: str = RUNTIME_PACKAGE) -> list[Migration]:
    """The ``migrations/`` of ``package``: the runtime's, or an application's (whose versions
    are recorded as ``<package>:NNNN`` so they never collide with the runtime's)."""
    prefix = "" if package == RUNTIME_PACKAGE else f"{package}:"
    found = []
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(prefix + match[1], match[2], entry.read_text("utf-8")))
        elif entry.name.lower().endswith(".sql"):
            # Skipping it would leave its tables missing with "schema is up to date".
            raise MigrationError(
                f"{package}/migrations/{entry.name} is not named NNNN_name.sql (four digits, "
                "an underscore, lower-case letters, digits or underscores): rename it"
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {versions}")
    return found


def migrate(
    conn: psycopg.Connection[Any],
    limits: Limits | None = None,
    *,
    package: str = RUNTIME_PACKAGE,
) -> list[str]:
    """Bring ``package``'s schema up to date, one transaction per migration; return the
    versions applied now. Run it for the runtime first, then for the application (its tables
    may refer to ours)."""
    limits = limits or Limits()
    applied_now: list[str] = []
    was_autocommit = conn.autocommit
    with translate():
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        conn.autocommit = True
        try:
            _set_timeouts(conn, statement_ms=limits.statement_timeout_ms(), lock_ms=0)
            _lock_out_other_runners(conn, limits)
            try:
                recorded = _recorded(conn)
                for migration in available_migrations(package):
                    if migration.version in recorded:
                        _check_unchanged(migration, recorded[migration.version])
                        continue
                    _apply_with_retries(conn, migration, limits)
                    applied_now.append(migration.version)
            finally:
                if not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
        finally:
            if not conn.broken:
                conn.execute("RESET statement_timeout")
                conn.execute("RESET lock_timeout")
                conn.autocommit = was_autocommit
    return applied_now


def _lock_out_other_runners(conn: psycopg.Connection[Any], limits: Limits) -> None:
    """Take the runners' advisory lock (session-level: it outlives each migration's transaction).

    Polled, never waited for inside a statement: a waiting statement is a transaction, and
    ``CREATE INDEX CONCURRENTLY`` in the runner that holds the lock waits for every transaction
    older than itself to end, so the two runners would deadlock.
    """
    while True:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (_LOCK_KEY,)).fetchone()
        if row and row[0]:
            return
        if limits.deadline is not None and time.monotonic() >= limits.deadline:
            raise MigrationError("another migration runner is still running")
        time.sleep(_LOCK_POLL_S)


def _recorded(conn: psycopg.Connection[Any]) -> dict[str, str]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version text PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())"
    )
    return dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall())


def _check_unchanged(migration: Migration, recorded_checksum: str) -> None:
    if recorded_checksum == migration.checksum or recorded_checksum in migration.supersedes:
        return
    raise MigrationError(
        f"migration {migration.version}_{migration.name} was changed after it "
        "was applied; add a new migration instead of editing an applied one"
    )


def _apply_with_retries(
    conn: psycopg.Connection[Any], migration: Migration, limits: Limits
) -> None:
    for attempt in range(1, limits.lock_attempts + 1):
        try:
            _apply(conn, migration, limits)
            return
        except pg_errors.LockNotAvailable:
            if attempt == limits.lock_attempts:
                raise
        except (psycopg.ProgrammingError, psycopg.DataError, psycopg.IntegrityError) as exc:
            # The file is at fault, not the database: say which one, and where.
            raise MigrationError(_describe_failure(migration, exc)) from exc
        # Writers got the table back while we wait; a jittered, growing pause lets a burst end.
        pause = min(0.25 * 2**attempt, 5.0) * random.uniform(0.5, 1.0)  # noqa: S311
        if limits.deadline is not None and time.monotonic() + pause >= limits.deadline:
            raise MigrationError(f"migration {migration.version}: out of time waiting for locks")
        time.sleep(pause)


def _describe_failure(migration: Migration, exc: psycopg.Error) -> str:
    """PostgreSQL's own words (its message names objects of the migration, not data) and, for
    a whole-file migration, the line the error position falls on."""
    message = exc.diag.message_primary or type(exc).__name__
    where = ""
    position = exc.diag.statement_position
    if position and migration.transactional and position.isdigit():
        line = migration.sql[: int(position)].count("\n") + 1
        where = f", line {line}"
    return (
        f"migration {migration.version} ({migration.version.split(':')[-1]}_{migration.name}.sql"
        f"{where}) failed: {message} ({exc.sqlstate})"
    )


def _apply(conn: psycopg.Connection[Any], migration: Migration, limits: Limits) -> None:
    statement_ms = limits.statement_timeout_ms()
    if migration.transactional:
        with conn.transaction():
            _set_timeouts(conn, statement_ms=statement_ms, lock_ms=limits.lock_timeout_ms)
            conn.execute(sql.SQL(migration.sql))
            _record(conn, migration)
        return
    _set_timeouts(conn, statement_ms=statement_ms, lock_ms=limits.lock_timeout_ms)
    try:
        for statement in migration.statements():
            conn.execute(sql.SQL(statement))
        _record(conn, migration)
    finally:
        if not conn.broken:
            _set_timeouts(conn, statement_ms=statement_ms, lock_ms=0)


def _set_timeouts(conn: psycopg.Connection[Any], *, statement_ms: int, lock_ms: int) -> None:
    # set_config(..., is_local) = SET LOCAL inside a transaction, SET for the session outside.
    local = conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    conn.execute(
        "SELECT set_config('statement_timeout', %s, %s), set_config('lock_timeout', %s, %s)",
        (str(statement_ms), local, str(lock_ms), local),
    )


def _record(conn: psycopg.Connection[Any], migration: Migration) -> None:
    conn.execute(
        "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
        (migration.version, migration.name, migration.checksum),
    )


def applied_versions(conn: psycopg.Connection[Any]) -> list[str]:
    with translate():
        exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return []
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
