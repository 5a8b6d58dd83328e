"""An application's own migrations: applied after the runtime's, recorded apart from them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import unique_db_name
from webhook_inbox.errors import MigrationError
from webhook_inbox.store import migrate as migrate_module
from webhook_inbox.store.migrate import Migration, applied_versions, available_migrations, migrate


@pytest.fixture
def application_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A throwaway application package whose 0001 refers to the runtime's inbox table."""
    package = tmp_path / "acme_app"
    (package / "migrations").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "migrations" / "0001_orders.sql").write_text(
        "CREATE TABLE orders (id text PRIMARY KEY,"
        " source_event bigint REFERENCES webhook_events (id));\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "acme_app"
    sys.modules.pop("acme_app", None)


def test_application_migrations_apply_after_the_runtimes_and_do_not_collide(
    empty_database_url: str, application_package: str
) -> None:
    with psycopg.connect(empty_database_url) as conn:
        runtime = migrate(conn)
        application = migrate(conn, package=application_package)
        again = migrate(conn, package=application_package)
        versions = applied_versions(conn)
        orders = conn.execute("SELECT to_regclass('orders') IS NOT NULL").fetchone()
    assert runtime[0] == "0001"
    assert application == ["acme_app:0001"]  # not "0001": that one is the runtime's
    assert again == []
    assert set(versions) == {*runtime, "acme_app:0001"}
    assert orders == (True,)


EXAMPLE_TABLES = ("subscriptions", "customers")
RELEASED_0001 = Path(__file__).parent / "migrations_as_released" / "0001_initial.sql"


def _example_tables(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[Any, ...]]]:
    """Each example table's columns and constraints, or an empty list when it does not exist."""
    return {
        table: conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,"
            " pg_get_expr(d.adbin, d.adrelid)"
            "  FROM pg_attribute a LEFT JOIN pg_attrdef d"
            "    ON (d.adrelid, d.adnum) = (a.attrelid, a.attnum)"
            " WHERE a.attrelid = to_regclass(%(t)s) AND a.attnum > 0 AND NOT a.attisdropped"
            " UNION ALL"
            " SELECT conname, pg_get_constraintdef(oid), NULL, NULL FROM pg_constraint"
            " WHERE conrelid = to_regclass(%(t)s)"
            " ORDER BY 1",
            {"t": table},
        ).fetchall()
        for table in EXAMPLE_TABLES
    }


def test_the_example_tables_come_from_the_applications_migration_not_the_runtimes(
    empty_database_url: str,
) -> None:
    with psycopg.connect(empty_database_url) as conn:
        migrate(conn)
        after_runtime = _example_tables(conn)
        assert migrate(conn, package="webhook_inbox_app") == ["webhook_inbox_app:0001"]
        after_application = _example_tables(conn)
    assert after_runtime == {"subscriptions": [], "customers": []}
    assert all(after_application.values())


def test_a_database_migrated_by_the_released_0001_keeps_its_example_tables_and_rows(
    empty_database_url: str, pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The released runtime 0001 created the example tables; the current one names its checksum.
    current = available_migrations()
    released_0001 = Migration("0001", "initial", RELEASED_0001.read_text("utf-8"))
    assert current[0].supersedes == {released_0001.checksum}
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: [released_0001])
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        migrate(conn)
        conn.execute(
            "INSERT INTO customers (provider, customer_id, status)"
            " VALUES ('stripe', 'cus_1', 'active')"
        )
        before = _example_tables(conn)
    monkeypatch.undo()
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        runtime = migrate(conn)
        application = migrate(conn, package="webhook_inbox_app")
        after = _example_tables(conn)
        rows = conn.execute("SELECT provider, customer_id, status FROM customers").fetchall()
        recorded = conn.execute("SELECT checksum FROM schema_migrations WHERE version = '0001'")
        recorded_0001 = recorded.fetchone()
    assert runtime == [m.version for m in current[1:]]  # 0001 accepted as applied, not re-run
    assert application == ["webhook_inbox_app:0001"]  # recorded; its IF NOT EXISTS found them
    assert rows == [("stripe", "cus_1", "active")]
    assert after == before
    assert recorded_0001 == (released_0001.checksum,)  # the previous release still accepts it
    name = unique_db_name("wi_fresh")
    fresh = pg_server.create_database(name)
    try:
        with psycopg.connect(fresh) as conn:
            migrate(conn)
            migrate(conn, package="webhook_inbox_app")
            assert _example_tables(conn) == after  # both paths end with the same tables
    finally:
        pg_server.drop_database(name)


def test_a_migration_postgresql_refuses_names_its_file_line_and_message(
    empty_database_url: str, application_package: str, tmp_path: Path
) -> None:
    (tmp_path / "acme_app" / "migrations" / "0002_credit_notes.sql").write_text(
        "-- credit notes\nCREATE TABLE credit_notes (\n  id text PRIMARY KEY,\n"
        "  amount int NOT NUL\n);\n"
    )
    with psycopg.connect(empty_database_url) as conn:
        migrate(conn)
        with pytest.raises(MigrationError) as refused:
            migrate(conn, package=application_package)
        assert applied_versions(conn)[-1] == "acme_app:0001"  # 0001 kept, 0002 rolled back
        assert conn.execute("SELECT to_regclass('credit_notes')").fetchone() == (None,)
    assert str(refused.value) == (
        "migration acme_app:0002 (0002_credit_notes.sql, line 4) failed: syntax error at or "
        'near "NUL" (42601)'
    )


@pytest.mark.parametrize("name", ["0002-credit-notes.sql", "0002_CreditNotes.sql", "2_x.sql"])
def test_a_misnamed_migration_file_is_an_error_not_skipped(
    application_package: str, tmp_path: Path, name: str
) -> None:
    (tmp_path / "acme_app" / "migrations" / name).write_text("CREATE TABLE x (id int);\n")
    with pytest.raises(MigrationError, match=rf"^acme_app/migrations/{name} is not named NNNN_"):
        available_migrations(application_package)
