import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import unique_db_name
from webhook_inbox.errors import MigrationError, StoreError
from webhook_inbox.store import migrate as migrate_module
from webhook_inbox.store.migrate import (
    Limits,
    Migration,
    applied_versions,
    available_migrations,
    migrate,
)

ALL = available_migrations()
# 0001 as first released, with the example application's tables (moved to its own migrations),
# and 0002 and 0003 as first released, before they were rewritten to build indexes CONCURRENTLY.
RELEASED = Path(__file__).parent / "migrations_as_released"

EXPECTED_TABLES = {
    "webhook_events",
    "outbox_messages",
    "operator_actions",
    "schema_migrations",
}


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {r[0] for r in rows}


def test_applies_to_an_empty_database_then_is_a_no_op(empty_database_url: str) -> None:
    with psycopg.connect(empty_database_url) as conn:
        first = migrate(conn)
        second = migrate(conn)
        versions = applied_versions(conn)
    assert first == [m.version for m in available_migrations()]
    assert second == []
    assert versions == first
    assert _tables(empty_database_url) >= EXPECTED_TABLES


def test_two_runners_started_at_once_apply_each_migration_once(empty_database_url: str) -> None:
    script = (
        "import sys, psycopg\n"
        "from webhook_inbox.store.migrate import migrate\n"
        "with psycopg.connect(sys.argv[1]) as c:\n"
        "    print(','.join(migrate(c)))\n"
    )
    runners = [
        subprocess.Popen(
            [sys.executable, "-c", script, empty_database_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [r.communicate(timeout=60) for r in runners]
    assert [r.returncode for r in runners] == [0, 0], outputs
    applied = sorted(out.strip() for out, _ in outputs)
    # One runner applied everything, the other waited on the lock and found nothing to do.
    assert applied[0] == ""
    assert applied[1] == ",".join(m.version for m in available_migrations())
    with psycopg.connect(empty_database_url) as conn:
        count = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()
    assert count is not None
    assert count[0] == len(available_migrations())


def test_an_edited_applied_migration_is_refused(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(empty_database_url) as conn:
        migrate(conn)
        original = available_migrations()
        edited = [Migration(m.version, m.name, m.sql + "\n-- edited") for m in original]
        monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: edited)
        with pytest.raises(MigrationError, match="changed after it was applied"):
            migrate(conn)


def test_a_failing_migration_rolls_itself_back_and_the_next_run_resumes(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = available_migrations()
    broken = [*real, Migration("9999", "broken", "CREATE TABLE half (n int);\nCREATE TABLE oops (")]
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: broken)
    with psycopg.connect(empty_database_url) as conn, pytest.raises(StoreError):
        migrate(conn)
    # Each migration is its own transaction: the ones before stay, the broken one left nothing.
    assert "half" not in _tables(empty_database_url)
    with psycopg.connect(empty_database_url) as conn:
        assert applied_versions(conn) == [m.version for m in real]
    fixed = [*real, Migration("9999", "fixed", "CREATE TABLE half (n int)")]
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: fixed)
    with psycopg.connect(empty_database_url) as conn:
        assert migrate(conn) == ["9999"]


def _schema(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {
            "columns": conn.execute(
                "SELECT table_name, column_name, data_type, is_nullable, column_default"
                " FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2"
            ).fetchall(),
            "constraints": conn.execute(
                "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
                " FROM pg_constraint WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2"
            ).fetchall(),
            "indexes": conn.execute(
                "SELECT i.indexname, i.indexdef, x.indisvalid FROM pg_indexes i"
                " JOIN pg_class c ON c.relname = i.indexname"
                " JOIN pg_index x ON x.indexrelid = c.oid"
                " WHERE i.schemaname = 'public' ORDER BY 1"
            ).fetchall(),
        }


def test_a_database_migrated_by_the_released_files_is_accepted_with_the_same_schema(
    empty_database_url: str, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0001 lost the example tables to the application's migrations, and 0002 and 0003 were
    # rewritten (CREATE INDEX CONCURRENTLY), after they shipped: a database that ran the released
    # text must be accepted and, with the application's migrations, have the current schema.
    current = available_migrations()
    released = [
        Migration(m.version, m.name, (RELEASED / f"{m.version}_{m.name}.sql").read_text())
        if (RELEASED / f"{m.version}_{m.name}.sql").exists()
        else m
        for m in current
    ]
    assert [m.checksum for m in released[:3]] == [next(iter(m.supersedes)) for m in current[:3]]
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: released)
    with psycopg.connect(empty_database_url) as conn:
        migrate(conn)
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: current)
    with psycopg.connect(empty_database_url) as conn:
        assert migrate(conn) == []
        monkeypatch.undo()  # the application's own migrations from here on
        migrate(conn, package="webhook_inbox_app")
        recorded = dict(conn.execute("SELECT version, checksum FROM schema_migrations"))
    # The record keeps the released checksum: the previous release still accepts the database.
    assert (recorded["0001"], recorded["0002"]) == (released[0].checksum, released[1].checksum)
    name = unique_db_name("wi_fresh")
    fresh = pg_server.create_database(name)
    try:
        with psycopg.connect(fresh) as conn:
            migrate(conn)
            migrate(conn, package="webhook_inbox_app")
        assert _schema(fresh) == _schema(empty_database_url)
    finally:
        pg_server.drop_database(name)


def test_no_transaction_migrations_are_safe_to_run_again(empty_database_url: str) -> None:
    # What a run that failed half-way leaves behind is undone or kept by the next run.
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        migrate(conn)
        for migration in available_migrations():
            if not migration.transactional:
                for statement in migration.statements():
                    conn.execute(statement)  # type: ignore[arg-type]
        assert conn.execute("SELECT bool_and(indisvalid) FROM pg_index").fetchone() == (True,)


def test_a_migration_gives_up_a_busy_lock_and_retries_a_bounded_number_of_times(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = Migration("9999", "touch", "ALTER TABLE customers ADD COLUMN note text")
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: [*ALL, extra])
    attempts: list[str] = []
    real_apply = migrate_module._apply

    def counted(conn: Any, migration: Migration, limits: Limits) -> None:
        attempts.append(migration.version)
        real_apply(conn, migration, limits)

    monkeypatch.setattr(migrate_module, "_apply", counted)
    with psycopg.connect(database_url) as holder:
        holder.execute("LOCK TABLE customers IN ACCESS SHARE MODE")  # a long reader
        started = time.monotonic()
        with psycopg.connect(database_url) as runner, pytest.raises(StoreError):
            migrate(runner, Limits(lock_timeout_ms=100, lock_attempts=3))
        elapsed = time.monotonic() - started
        # Three lock waits of 0.1 s (counted, not timed: a loaded machine stretches every
        # figure) and two pauses between them, then it gave up.
        assert attempts.count("9999") == 3
        assert elapsed >= 0.3
        # The reader kept its lock throughout; writers queued behind the migration for at
        # most one lock timeout at a time.
        holder.rollback()
    with psycopg.connect(database_url) as runner:
        assert migrate(runner, Limits(lock_timeout_ms=100, lock_attempts=3)) == ["9999"]


def test_a_migration_that_waited_succeeds_once_the_lock_is_free(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = Migration("9999", "touch", "ALTER TABLE customers ADD COLUMN note text")
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: [*ALL, extra])
    holder = psycopg.connect(database_url)
    holder.execute("LOCK TABLE customers IN ACCESS SHARE MODE")
    release = threading.Timer(0.4, holder.rollback)
    release.start()
    try:
        with psycopg.connect(database_url) as runner:
            assert migrate(runner, Limits(lock_timeout_ms=100, lock_attempts=5)) == ["9999"]
    finally:
        release.join()
        holder.close()


def test_a_run_past_its_deadline_starts_nothing(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = Migration("9999", "slow", "SELECT pg_sleep(5)")
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: [*ALL, extra])
    started = time.monotonic()
    with psycopg.connect(database_url) as runner, pytest.raises(StoreError):
        migrate(runner, Limits(deadline=time.monotonic() + 0.5))
    assert time.monotonic() - started < 2  # the statement timeout followed the deadline
    with psycopg.connect(database_url) as check:
        assert "9999" not in applied_versions(check)


def test_migration_files_are_numbered_and_packaged() -> None:
    folder = Path(migrate_module.__file__).parent / "migrations"
    names = sorted(p.name for p in folder.glob("*.sql"))
    assert names == [f"{m.version}_{m.name}.sql" for m in available_migrations()]


@pytest.mark.parametrize(
    ("column_values", "violated"),
    [
        ({"status": "'done'"}, "webhook_events_status_check"),
        ({"provider": "'Bad Provider'"}, "webhook_events_provider_check"),
        ({"event_id": "''"}, "webhook_events_event_id_check"),
        ({"status": "'processing'"}, "webhook_events_lease_iff_processing"),
    ],
)
def test_the_database_enforces_the_inbox_invariants(
    conn: psycopg.Connection[Any], column_values: dict[str, str], violated: str
) -> None:
    values = {
        "provider": "'stripe'",
        "event_id": "'evt_1'",
        "event_type": "'x'",
        "body_sha256": "decode(repeat('ab', 32), 'hex')",
        "payload": "'{}'::jsonb",
        "status": "'received'",
    } | column_values
    columns, literals = ", ".join(values), ", ".join(values.values())
    statement = f"INSERT INTO webhook_events ({columns}) VALUES ({literals})"  # noqa: S608
    with pytest.raises(psycopg.errors.CheckViolation) as excinfo:
        conn.execute(statement)  # type: ignore[call-overload]
    assert excinfo.value.diag.constraint_name == violated
