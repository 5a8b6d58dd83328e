"""Catch a handler that ends or rewinds the batch's transaction, right after it returns.

Both passes run their handlers inside :func:`webhook_inbox.store.db.handler_batch`, where the
connection refuses a handler's ``commit()`` and ``rollback()`` (:func:`refused_call` names the
refusal for the careful pass), but the same thing sent as SQL goes through: ``ROLLBACK``
silently undoes the batch-mates handled before, ``COMMIT`` commits them without their marks,
``… AND CHAIN`` does either and opens a fresh transaction, ``RELEASE``/``ROLLBACK TO`` a
savepoint the handler did not create rewinds or flattens the structure the passes rely on, and
``PREPARE TRANSACTION`` hands the batch's work and its locks to a prepared transaction.
Whatever ran after that would be marked ``processed`` without the writes it made before.

In the careful pass every handler runs inside a savepoint of ours, with a transaction-local
mark set inside it (``sql/handler_guard.sql``). Right after the handler, these facts tell what
it did (:func:`guarded` raises :class:`TransactionTaken`):

* the session is idle (``conn.info.transaction_status``): it ended the transaction;
  ``pg_xact_status`` of the batch's transaction id says committed, rolled back or prepared;
* the transaction id changed: it ended the transaction ``AND CHAIN``;
* the mark is gone but the transaction is the same: it rolled back to our savepoint;
* releasing (or rolling back to) our savepoint fails: it destroyed it (``RELEASE``).

The fast pass (pipeline mode, nothing waited for) cannot ask as it goes, and needs no savepoint
(it never rolls one event back alone). Right after its BEGIN, :func:`ask_batch_transaction`
records the batch's transaction id in a transaction-local setting; a handler that ends the
transaction takes the setting with it. Rewinding (``ROLLBACK TO``) needs a savepoint some
earlier handler left open, so :class:`PipelineMarks` appends a handler's token to a second
transaction-local list right after each handler that may have left one (the connection notes a
``SAVEPOINT`` sent through its cursors, and ``conn.transaction()`` blocks still open:
:meth:`webhook_inbox.store.db.Connection.watch_savepoints`): rolling back to that savepoint
takes the token too. One statement after the last handler fails unless the transaction is still
the recorded one and the list is whole, which aborts the pipeline before the batch's marks and
its COMMIT (:func:`begin_batch` and :func:`commit_batch` bracket the pass, both sent without
waiting). The pass then gives up, and the careful pass finds the handler. A batch of handlers
that open no savepoint costs the guard two statements, whatever its size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.pq import TransactionStatus

from webhook_inbox.errors import ConfigurationError, TransactionControlError
from webhook_inbox.store import db
from webhook_inbox.store.db import CommitRefused
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translate, translated


class TransactionTaken(Exception):
    """A handler ended or rewound the batch's transaction: the careful pass must abandon it."""

    def __init__(self, error: TransactionControlError) -> None:
        super().__init__(str(error))
        self.error = error


_statement = SqlFile("handler_guard").statement


def _taken(what: str) -> TransactionTaken:
    return TransactionTaken(TransactionControlError(f"handler {what}"))


# --- the fast pass: statements sent in pipeline mode, never waited for ---------------------


def begin_batch(conn: psycopg.Connection[Any]) -> None:
    """Open the fast pass's transaction: the first statement in its pipeline."""
    conn.execute(_statement("begin_batch"))


def commit_batch(conn: psycopg.Connection[Any]) -> None:
    """Queue the fast pass's COMMIT behind its marks; it runs only if nothing before it failed."""
    conn.execute(_statement("commit_batch"))


def ask_batch_transaction(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
    """Record the batch's transaction id for the check, and ask for it without waiting;
    :func:`settle_asked` reads it."""
    return conn.execute(_statement("open_batch_guard"))


def settle_asked(conn: psycopg.Connection[Any], asked: psycopg.Cursor[Any]) -> None:
    """After the fast pass gave up: roll back its transaction if a handler prepared it (its
    locks would block the careful pass). Nothing to do if the answer never came (the pass
    failed before its first wait, so no handler statement ran)."""
    try:
        row = asked.fetchone()
    except psycopg.Error:
        return
    if row is not None:
        settle(conn, str(row[0]))


class PipelineMarks:
    """The fast pass's marks: after each handler that may have left a savepoint open, its token
    is appended to a transaction-local list; :meth:`finish` fails the pipeline, before the
    batch's marks, unless the batch's transaction is still the one :func:`ask_batch_transaction`
    recorded and the list is whole. No savepoint of ours: nothing in the fast pass is rolled
    back alone, so a handler that only RELEASEs a savepoint harms no one there."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        if not isinstance(conn, db.Connection):  # handler_batch has refused it already
            raise ConfigurationError("the processor's connection must come from store.db.connect")
        self._conn = conn
        self._expected = ""
        self._handlers = 0
        conn.watch_savepoints()

    def after_handler(self, token: str) -> None:
        self._handlers += 1
        if self._conn.savepoint_may_be_open():
            self._conn.execute(_statement("mark_handler"), {"token": token})
            self._expected += f"{token},"

    def finish(self) -> None:
        if self._handlers:
            self._conn.execute(_statement("check_batch_guard"), {"expected": self._expected})


# --- the careful pass: every question answered as it is asked ------------------------------


@translated
def batch_transaction(conn: psycopg.Connection[Any]) -> str:
    """The id of the transaction just begun (assigned now), for :func:`guarded`."""
    (xid,) = conn.execute(_statement("batch_transaction")).fetchone() or ("",)
    return str(xid)


# What a failing RELEASE / ROLLBACK TO of our savepoint means, after the facts were read or not.
_RELEASED = "released a savepoint it did not create (RELEASE)"
_DESTROYED = "destroyed the savepoint around it (RELEASE, ROLLBACK TO, or AND CHAIN after an error)"


@contextmanager
def guarded(conn: psycopg.Connection[Any], token: str, xid: str) -> Iterator[Callable[[], None]]:
    """Run a handler in our savepoint; yields the check to call right after the handler.

    Raises :class:`TransactionTaken` when the handler ended or rewound the transaction (also if
    it then raised); otherwise the savepoint is released, or rolled back if the block raised.
    """

    def check() -> None:
        _check(conn, token, xid)

    with translate():
        conn.execute(_statement("open_handler_savepoint"))
        conn.execute(_statement("mark_handler_savepoint"), {"token": token})
    try:
        yield check
    except TransactionTaken:
        raise
    except Exception:
        # Checked: the same transaction, the mark intact; else only the savepoint can tell.
        checked = _check(conn, token, xid)
        _end_savepoint(
            conn,
            "rollback_to_handler_savepoint",
            "release_handler_savepoint",
            destroyed=_RELEASED if checked else _DESTROYED,
        )
        raise
    _end_savepoint(conn, "release_handler_savepoint", destroyed=_RELEASED)


def _check(conn: psycopg.Connection[Any], token: str, xid: str) -> bool:
    """Raise TransactionTaken if the facts show the handler took the transaction; False when
    they cannot be read (a statement failed and the transaction is aborted)."""
    status = conn.info.transaction_status
    if status == TransactionStatus.IDLE:
        raise _taken(_how_it_ended(conn, xid))
    if status != TransactionStatus.INTRANS:
        return False
    with translate():
        row = conn.execute(
            _statement("handler_guard_facts"), {"token": token, "xid": xid}
        ).fetchone()
    savepoint_intact, same_transaction, ended_as = row or (False, False, None)
    if not same_transaction:
        chained = "COMMIT AND CHAIN" if ended_as == "committed" else "ROLLBACK AND CHAIN"
        raise _taken(f"ended the transaction and began another ({chained})")
    if not savepoint_intact:
        raise _taken("rolled back to a savepoint it did not create (ROLLBACK TO)")
    return True


def _how_it_ended(conn: psycopg.Connection[Any], xid: str) -> str:
    status = batch_status(conn, xid)
    if status == "committed":
        return "ended the transaction, which committed (COMMIT or END)"
    if status == "in progress":
        return "prepared the transaction (PREPARE TRANSACTION)"
    return "ended the transaction, which rolled back (ROLLBACK or ABORT, or a refused PREPARE)"


def _end_savepoint(conn: psycopg.Connection[Any], *names: str, destroyed: str) -> None:
    with translate():
        try:
            for name in names:
                conn.execute(_statement(name))
        except pg_errors.InvalidSavepointSpecification:
            raise _taken(destroyed) from None


@translated
def batch_status(conn: psycopg.Connection[Any], xid: str) -> str:
    """``committed``, ``aborted`` or ``in progress`` (prepared, or still open) for ``xid``."""
    row = conn.execute(_statement("batch_status"), {"xid": xid}).fetchone()
    return str(row[0]) if row else "aborted"


@translated
def settle(conn: psycopg.Connection[Any], xid: str) -> bool:
    """After the batch's transaction was abandoned: whether its work committed. A transaction a
    handler prepared is rolled back here, so its locks do not outlive the batch."""
    status = batch_status(conn, xid)
    if status == "in progress":
        row = conn.execute(_statement("prepared_batch"), {"xid": xid}).fetchone()
        if row is not None:
            conn.execute(_statement("rollback_prepared_batch").format(gid=sql.Literal(row[0])))
    return status == "committed"


def refused_call(exc: BaseException) -> TransactionControlError | None:
    """The error to record when the connection refused a handler's ``commit()`` /
    ``rollback()`` (:func:`webhook_inbox.store.db.handler_batch`)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, CommitRefused):
            return TransactionControlError(
                f"handler called conn.{seen.call}() in the batch's transaction (refused)"
            )
        seen = seen.__cause__
    return None
