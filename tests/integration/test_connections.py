"""The process connection: bounded timeouts, reopened after failures, role defaults."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from webhook_inbox import db
from webhook_inbox.errors import StoreUnavailable


def test_connection_carries_the_configured_timeouts(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT_MS", "1234")
    monkeypatch.setenv("DB_LOCK_TIMEOUT_MS", "567")
    with db.connect(database_url) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("1234ms",)
        assert conn.execute("SHOW lock_timeout").fetchone() == ("567ms",)


def test_a_slow_statement_is_cut_off_as_store_unavailable(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT_MS", "200")
    with db.connect(database_url) as conn, pytest.raises(StoreUnavailable), db.translate():
        conn.execute("SELECT pg_sleep(5)")


def test_process_connection_is_reused_and_reopened_after_termination(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    first = db.get_connection()
    assert db.get_connection() is first
    pid = first.info.backend_pid
    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StoreUnavailable), db.translate():
        first.execute("SELECT 1")
    second = db.get_connection()
    assert second is not first
    assert second.execute("SELECT 1").fetchone() == (1,)


def test_a_failed_transaction_is_rolled_back_before_reuse(database_url: str) -> None:
    first = db.get_connection()
    with pytest.raises(psycopg.errors.DivisionByZero):
        first.execute("SELECT 1/0")
    again = db.get_connection()
    assert again is first
    assert again.execute("SELECT 2").fetchone() == (2,)


def test_role_timeouts_apply_to_new_sessions_without_startup_options(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT_MS", "4321")
    monkeypatch.setenv("DB_LOCK_TIMEOUT_MS", "876")
    with db.connect(database_url) as conn:
        db.set_role_timeouts(conn)
        conn.commit()
    monkeypatch.setenv("DB_STARTUP_OPTIONS", "off")
    try:
        with db.connect(database_url) as fresh:
            assert fresh.execute("SHOW statement_timeout").fetchone() == ("4321ms",)
            assert fresh.execute("SHOW lock_timeout").fetchone() == ("876ms",)
    finally:  # the role is shared by every test database on this server
        with psycopg.connect(database_url, autocommit=True) as reset:
            reset.execute("ALTER ROLE CURRENT_USER RESET statement_timeout")
            reset.execute("ALTER ROLE CURRENT_USER RESET lock_timeout")
