"""No migration may make the application's writes wait.

Each migration runs against populated tables while a writer holds an open transaction on
``webhook_events`` and ``outbox_messages`` (a ROW EXCLUSIVE lock, as every claim, lease and
outbox insert does). A statement that asks for a lock conflicting with it (``SHARE`` for a plain
``CREATE INDEX``, ``ACCESS EXCLUSIVE`` for most ``ALTER TABLE``) has to wait for the writer, and
while it waits every later writer queues behind it: that wait is what this test catches, from
``pg_locks``. ``CREATE INDEX CONCURRENTLY`` only waits for the writer's *transaction* to end
(a virtualxid wait): the test then commits the writer and opens a new one, so every phase of
the migration runs beside a live writer.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from webhook_inbox.store import migrate as migrate_module
from webhook_inbox.store.migrate import Limits, Migration, available_migrations, migrate

WATCHED = ("webhook_events", "outbox_messages")
ALL = available_migrations()


def _migrate_to(url: str, upto: list[Migration], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: upto)
    with psycopg.connect(url) as conn:
        migrate(conn)


def _populate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload,"
            " status, processed_at)"
            " SELECT 'stripe', 'evt_' || g, 't', sha256(g::text::bytea), '{}'::jsonb,"
            "  (ARRAY['received','processed','failed','ignored'])[1 + g % 4],"
            "  CASE WHEN g % 4 = 1 THEN now() END"
            " FROM generate_series(1, 2000) AS g"
        )
        conn.execute(
            "INSERT INTO outbox_messages (topic, deduplication_key, payload)"
            " SELECT 't', 'k' || g, '{}'::jsonb FROM generate_series(1, 2000) AS g"
        )


class Writer:
    """An open transaction that has written to both watched tables."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url)
        self.begin()

    def begin(self) -> None:
        key = uuid.uuid4().hex
        self.conn.execute(
            "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload)"
            " VALUES ('stripe', %s, 't', sha256(%s::bytea), '{}')",
            (key, key.encode()),
        )
        self.conn.execute(
            "INSERT INTO outbox_messages (topic, deduplication_key, payload)"
            " VALUES ('t', %s, '{}')",
            (key,),
        )

    def cycle(self) -> None:
        self.conn.commit()
        self.begin()

    def close(self) -> None:
        self.conn.commit()
        self.conn.close()


def _waits_of(observer: psycopg.Connection[Any], pid: int) -> list[tuple[str, str | None, str]]:
    rows = observer.execute(
        "SELECT locktype, relation::regclass::text, mode FROM pg_locks"
        " WHERE pid = %s AND NOT granted",
        (pid,),
    ).fetchall()
    return [(str(t), r, str(m)) for t, r, m in rows]


@pytest.mark.parametrize("index", range(1, len(ALL)), ids=[m.version for m in ALL[1:]])
def test_a_migration_never_makes_writers_wait(
    index: int, empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = empty_database_url
    _migrate_to(url, ALL[:index], monkeypatch)
    _populate(url)
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: ALL[: index + 1])
    writer = Writer(url)
    runner = psycopg.connect(url)
    outcome: list[Exception | list[str]] = []

    def run() -> None:
        try:
            outcome.append(migrate(runner, Limits(lock_timeout_ms=10_000, lock_attempts=1)))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            outcome.append(exc)

    blocking: list[tuple[str, str | None, str]] = []
    thread = threading.Thread(target=run)
    try:
        with psycopg.connect(url, autocommit=True) as observer:
            thread.start()
            deadline = time.monotonic() + 30
            while thread.is_alive():
                assert time.monotonic() < deadline, "the migration never finished"
                waits = _waits_of(observer, runner.info.backend_pid)
                if waits:
                    blocking += [w for w in waits if w[0] == "relation" and w[1] in WATCHED]
                    writer.cycle()  # let it go on, beside a new writer
                time.sleep(0.01)
    finally:
        thread.join(timeout=30)
        writer.close()
        runner.close()
    assert outcome == [[ALL[index].version]]
    assert blocking == [], f"{ALL[index].version} waits for a lock that blocks writes: {blocking}"
