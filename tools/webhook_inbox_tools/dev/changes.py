"""Whether a processed event's handler changed anything, for dev's console line
(``processed`` or ``processed, no change``).

dev puts a row trigger on each of your application's tables (the tables your migrations made:
every table but the runtime's and dev's own) that records the event whose handler is running,
as dev's processor names it before each handler (:func:`name_each_handlers_event`: one
statement per event, in dev only). A deployed stack has none of this: it costs the processor
nothing. Emitted outbox messages count as a change too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg import Connection, sql

from webhook_inbox.store.queries import SqlFile

_statement = SqlFile("dev", package="webhook_inbox_tools").statement

TRIGGER = "webhook_inbox_dev_handler_change"


def tables(conn: Connection[Any]) -> set[str]:
    return {
        name
        for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        )
    }


def watch(conn: Connection[Any], application_tables: Iterable[str]) -> None:
    """Record from now on which events' handlers change ``application_tables``."""
    conn.execute(_statement("create_handler_changes"))
    conn.execute(_statement("create_change_trigger_function"))
    for table in sorted(application_tables):
        if table.startswith("dev_"):
            continue
        conn.execute(
            sql.SQL(
                "CREATE OR REPLACE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {}"
                " FOR EACH ROW EXECUTE FUNCTION dev_note_handler_change()"
            ).format(sql.Identifier(TRIGGER), sql.Identifier(table))
        )


def name_each_handlers_event() -> None:
    """In dev's processor process: run each handler after a statement naming its event for the
    trigger. The handlers' registry answers with a wrapper; the passes are unchanged."""
    from webhook_inbox.processing import handlers
    from webhook_inbox.processing.domain import Handler

    find = handlers.handler_for

    def handler_for(provider: str, event_type: str) -> Handler | None:
        handler = find(provider, event_type)
        if handler is None:
            return None
        run = handler

        def named(conn: Connection[Any], event: Any) -> Any:
            conn.execute(_statement("name_handler_event"), {"id": str(event.id)})
            return run(conn, event)

        return named

    handlers.handler_for = handler_for


def changed(conn: Connection[Any], row_id: int) -> bool:
    found = conn.execute(_statement("handler_changed"), {"id": row_id}).fetchone()
    return bool(found and found[0])
