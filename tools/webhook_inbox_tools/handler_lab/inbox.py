"""A delivery through the real pipeline, for a handler's tests: signed as its provider signs,
answered by the real ingest, processed by the real processor, on a throwaway database; what it
changed in the application's tables and the outbox, read back for the test to assert on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row

from webhook_inbox import config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import pipeline, providers
from webhook_inbox.settings import IngestSettings
from webhook_inbox_tools import sample_events
from webhook_inbox_tools.dev.apigw import delivery_event_v2
from webhook_inbox_tools.handler_lab import lab
from webhook_inbox_tools.handler_lab.lab import Lab, Snapshot

BASE_URL = "https://webhooks.test"


@dataclass(frozen=True)
class Changes:
    """The rows one table gained and lost (an updated row is one of each)."""

    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Delivered:
    """One delivery's fate: ingest's answer, the event's final status, and what processing it
    changed (volatile columns, the timestamps, left out) and emitted."""

    status: int
    answer: Any
    event_id: str | None
    row_id: int | None
    state: str | None  # processed | ignored | failed | dead_letter | … (None: nothing stored)
    last_error: str | None
    changes: Mapping[str, Changes]
    outbox: list[dict[str, Any]]

    @property
    def changed(self) -> bool:
        """Whether the handler wrote a row or emitted a message."""
        return bool(self.outbox) or any(c.added or c.removed for c in self.changes.values())


class Inbox:
    """One throwaway database with the runtime's and the application's migrations, the
    application's handlers installed, and the providers of ``registry``."""

    def __init__(self, lab_: Lab, registry: providers.Registry, handlers_path: str) -> None:
        from webhook_inbox.processing import handlers
        from webhook_inbox_tools.handler_lab.properties import load_handlers

        self._lab = lab_
        self._registry = registry
        self._previous = dict(handlers.HANDLERS)
        self.database_url = lab_.database()
        lab.use_database(self.database_url, load_handlers(handlers_path))

    def close(self) -> None:
        """Put back the handlers this process had (the inbox installed the application's)."""
        from webhook_inbox.processing import handlers
        from webhook_inbox.store import db

        handlers.clear()
        handlers.install(self._previous)
        db.reset_for_tests()

    def deliver(
        self,
        provider: str,
        event_type: str | None = None,
        *,
        payload: Any = None,
        overrides: Sequence[str] = (),
        event_id: str | None = None,
    ) -> Delivered:
        """Deliver a sample of ``event_type`` (``overrides``: ``path=value`` as `trigger`
        takes them) or ``payload`` as ``provider`` would send it, and process it."""
        configured = self._registry.get(provider)
        if configured is None:
            raise ConfigurationError(f"no provider {provider!r} in the providers file")
        body, event_id, event_type = self._body(
            configured, event_type, payload, overrides, event_id
        )
        signed = providers.sign_delivery(
            configured,
            body,
            event_id=event_id,
            event_type=event_type,
            url=f"{BASE_URL}/webhooks/{provider}",
        )
        url = signed.url or f"{BASE_URL}/webhooks/{provider}"
        event = delivery_event_v2(provider, url, signed.headers, signed.body)
        before = self._lab.snapshot(self.database_url)
        outcome = pipeline.handle(
            event,
            sqs_client=_no_queue,
            settings=lambda: config.current(IngestSettings),
            providers=self._registry,
        )
        if outcome.row_id is not None and outcome.new_events:
            lab.process([outcome.row_id])
        after = self._lab.snapshot(self.database_url)
        state, error = self._status(outcome.row_id)
        return Delivered(
            status=outcome.status,
            answer=_answer(outcome.reply.body),
            event_id=outcome.event_id,
            row_id=outcome.row_id,
            state=state,
            last_error=error,
            changes=_changes(before, after),
            outbox=[m for m in after.outbox if m not in before.outbox],
        )

    def _body(
        self,
        provider: providers.Provider,
        event_type: str | None,
        payload: Any,
        overrides: Sequence[str],
        event_id: str | None,
    ) -> tuple[bytes, str | None, str | None]:
        if payload is not None:
            return json.dumps(payload, separators=(",", ":")).encode(), event_id, event_type
        if event_type is None:
            raise ConfigurationError("give the event type to send a sample of, or a payload")
        parsed = [sample_events.parse_override(text) for text in overrides]
        built = sample_events.build(provider, event_type, now=int(time.time()), overrides=parsed)
        return built.body, event_id or built.event_id, event_type

    def _status(self, row_id: int | None) -> tuple[str | None, str | None]:
        if row_id is None:
            return None, None
        with psycopg.connect(self.database_url) as conn:
            found = conn.execute(
                "SELECT status, last_error FROM webhook_events WHERE id = %s", (row_id,)
            ).fetchone()
        return (found[0], found[1]) if found else (None, None)

    def query(self, statement: str, params: Any = None) -> list[dict[str, Any]]:
        """Rows of a query on the test's database (the application's tables, say)."""
        with psycopg.connect(self.database_url) as conn, conn.cursor(row_factory=dict_row) as cur:
            return list(cur.execute(statement, params))


def _no_queue() -> Any:
    raise AssertionError("ingest sends no wake-up here: PROCESSING_QUEUE_URL is unset")


def _answer(body: str) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return body


def _changes(before: Snapshot, after: Snapshot) -> dict[str, Changes]:
    found = {}
    for table in sorted(set(before.tables) | set(after.tables)):
        old, new = before.tables.get(table, []), after.tables.get(table, [])
        found[table] = Changes(
            added=[row for row in new if row not in old],
            removed=[row for row in old if row not in new],
        )
    return found
