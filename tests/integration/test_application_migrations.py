"""An application's own migrations: applied after the runtime's, recorded apart from them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from webhook_inbox.errors import MigrationError
from webhook_inbox.migrate import applied_versions, available_migrations, migrate


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


def test_the_example_application_ships_no_migration_of_its_own_yet() -> None:
    # Its tables are still in the runtime's 0001 (moving them needs a coordinated migration).
    assert available_migrations("webhook_inbox_app") == []


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
