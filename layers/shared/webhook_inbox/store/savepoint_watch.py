"""What may have opened a savepoint on the processor's connection, for the fast pass's guard
(:mod:`webhook_inbox.processing.handler_guard`; docs/design.md, "A handler cannot end the batch").

A handler that rolls back to a savepoint an earlier handler left open undoes its batch-mates'
writes without ending the transaction; the fast pass catches it with a transaction-local mark
after each handler that may have left one open. Nothing but a ``SAVEPOINT`` command opens one,
so while the guard watches, the connection's cursors (``store.db.HandlerCursor``, behind
``conn.execute`` and ``conn.cursor()``) note a statement that starts with ``SAVEPOINT``, and
:class:`WatchingConnection` counts psycopg's own nested blocks (``conn.transaction()``, which
send their savepoints around the cursors) still open. A savepoint sent around both (a cursor
class built by hand, libpq directly) is not seen: docs/handlers.md asks handlers not to.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import sql
from psycopg.abc import Query
from psycopg.rows import TupleRow


class WatchingConnection(psycopg.Connection[TupleRow]):
    """A connection that, between :meth:`watch_savepoints` and :meth:`stop_watching`, notes what
    may have opened a savepoint."""

    watching = False
    _savepoint_sent = False  # a SAVEPOINT went through a HandlerCursor since the last ask
    _blocks_open = 0  # psycopg's nested blocks still open

    def watch_savepoints(self) -> None:
        self.watching, self._savepoint_sent, self._blocks_open = True, False, 0

    def stop_watching(self) -> None:
        self.watching = self._savepoint_sent = False

    def savepoint_may_be_open(self) -> bool:
        """Whether a savepoint may be open since the last call: a ``SAVEPOINT`` went through
        this connection's cursors, or a ``conn.transaction()`` block is still open."""
        sent, self._savepoint_sent = self._savepoint_sent, False
        return sent or self._blocks_open > 0

    def note_statement(self, query: Query) -> None:
        """Called by the connection's cursors while :attr:`watching`, before each statement."""
        # The statements of the sql files, the common case, answered from the cache at once.
        if type(query) is sql.SQL:
            opens = _sql_file_statement_opens(query.as_string())
        else:
            opens = _may_open_savepoint(query, self)
        if opens:
            self._savepoint_sent = True

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        self._blocks_open += 1
        try:
            with super().transaction(savepoint_name, force_rollback) as tx:
                yield tx
        finally:
            self._blocks_open -= 1


def _may_open_savepoint(query: Query, conn: psycopg.Connection[Any]) -> bool:
    """Whether ``query`` may open a savepoint: it is a ``SAVEPOINT`` command (nothing else opens
    one: PL/pgSQL and SQL functions cannot, a procedure's transaction control fails inside a
    transaction block, and pipeline mode's extended protocol takes one statement per execute),
    or it is not plain enough to tell (a template, a comment that does not end)."""
    if isinstance(query, sql.SQL):  # the statements of the sql files, run again and again
        return _sql_file_statement_opens(query.as_string(conn))
    if isinstance(query, sql.Composable):
        query = query.as_string(conn)
    if isinstance(query, bytes):
        query = query.decode("utf-8", "replace")
    return _starts_with_savepoint(query) if isinstance(query, str) else True


def _starts_with_savepoint(text: str) -> bool:
    i, end = 0, len(text)
    while i < end:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            i = text.find("\n", i)
            if i < 0:
                return False  # nothing but comments
        elif text.startswith("/*", i):  # PostgreSQL's block comments nest
            depth, i = 1, i + 2
            while depth:
                opens, closes = text.find("/*", i), text.find("*/", i)
                if closes < 0:
                    return True  # unterminated: the server decides, we cannot tell
                if 0 <= opens < closes:
                    depth, i = depth + 1, opens + 2
                else:
                    depth, i = depth - 1, closes + 2
        else:
            return text[i : i + 9].upper() == "SAVEPOINT"
    return False


# Only the fixed texts of sql.SQL objects: a composed or formatted statement may carry values.
_sql_file_statement_opens = lru_cache(maxsize=256)(_starts_with_savepoint)
