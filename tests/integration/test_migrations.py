import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from webhook_inbox import migrate as migrate_module
from webhook_inbox.errors import MigrationError, StoreError
from webhook_inbox.migrate import Migration, applied_versions, available_migrations, migrate

EXPECTED_TABLES = {
    "webhook_events",
    "outbox_messages",
    "operator_actions",
    "subscriptions",
    "customers",
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
        "from webhook_inbox.migrate import migrate\n"
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


def test_a_failing_migration_applies_nothing(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = [*available_migrations(), Migration("9999", "broken", "CREATE TABLE oops (")]
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: broken)
    with psycopg.connect(empty_database_url) as conn, pytest.raises(StoreError):
        migrate(conn)
    assert _tables(empty_database_url) == set()


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
