"""The process connection: bounded timeouts, reopened after failures, role defaults."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from webhook_inbox import config
from webhook_inbox.errors import StoreUnavailable
from webhook_inbox.store import db
from webhook_inbox.store.store_errors import translate


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
    with (
        db.connect(database_url) as conn,
        pytest.raises(StoreUnavailable),
        translate(),
    ):
        conn.execute("SELECT pg_sleep(5)")


def test_process_connection_is_reused_and_reopened_after_termination(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    first = db.get_connection()
    assert db.get_connection() is first
    pid = first.info.backend_pid
    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StoreUnavailable), translate():
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
    config.reset()  # the settings were read by the first connect
    try:
        with db.connect(database_url) as fresh:
            assert fresh.execute("SHOW statement_timeout").fetchone() == ("4321ms",)
            assert fresh.execute("SHOW lock_timeout").fetchone() == ("876ms",)
    finally:  # the role is shared by every test database on this server
        with psycopg.connect(database_url, autocommit=True) as reset:
            reset.execute("ALTER ROLE CURRENT_USER RESET statement_timeout")
            reset.execute("ALTER ROLE CURRENT_USER RESET lock_timeout")


def _terminate(conn: psycopg.Connection[Any], victim: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))


def test_a_repeatable_statement_on_a_dead_kept_connection_runs_once_more_on_a_fresh_one(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    kept = db.get_connection()
    db.run_repeatable(lambda c: c.execute("SELECT 1"))  # an earlier invocation's statement
    _terminate(conn, kept)
    calls: list[int] = []

    def work(c: psycopg.Connection[Any]) -> int:
        calls.append(c.info.backend_pid)
        with translate():
            row = c.execute("SELECT 7").fetchone()
        assert row is not None
        return int(row[0])

    assert db.run_repeatable(work) == (7, True)
    assert len(calls) == 2
    assert db.get_connection() is not kept


def test_no_retry_when_the_statement_failed_but_the_connection_is_fine(database_url: str) -> None:
    calls = 0

    def work(c: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        with translate():
            c.execute("SET LOCAL statement_timeout = 100; SELECT pg_sleep(2)")

    db.get_connection()
    with pytest.raises(StoreUnavailable):
        db.run_repeatable(work)
    assert calls == 1


def test_no_retry_inside_a_transaction_that_already_did_work(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    kept = db.get_connection()
    db.run_repeatable(lambda c: c.execute("SELECT 1"))
    kept.autocommit = False
    kept.execute("SELECT 1")  # the transaction has begun: its work would die with the connection
    _terminate(conn, kept)
    calls = 0

    def work(c: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        with translate():
            c.execute("SELECT 2")

    with pytest.raises(StoreUnavailable):
        db.run_repeatable(work)
    assert calls == 1


def test_no_retry_on_a_connection_that_never_answered(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    # Opened earlier in this invocation (the processor opens it to check its state) but never
    # used: its failure is the database's, not a stale connection's.
    opened = db.get_connection()
    _terminate(conn, opened)
    calls = 0

    def work(c: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        with translate():
            c.execute("SELECT 2")

    with pytest.raises(StoreUnavailable):
        db.run_repeatable(work)
    assert calls == 1


def test_no_retry_when_a_fresh_connection_fails(
    database_url: str, conn: psycopg.Connection[Any]
) -> None:
    calls = 0

    def work(c: psycopg.Connection[Any]) -> None:
        nonlocal calls
        calls += 1
        _terminate(conn, c)
        with translate():
            c.execute("SELECT 2")

    with pytest.raises(StoreUnavailable):
        db.run_repeatable(work)
    assert calls == 1
