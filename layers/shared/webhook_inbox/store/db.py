"""The process-wide database connection, how it is opened, and where to connect.

One connection per process (one per Lambda execution environment), opened lazily and
re-opened after a failure. ``prepare_threshold=None`` keeps psycopg from creating server-side
prepared statements, which would pin sessions behind RDS Proxy.

A connection kept across invocations can be dead without knowing it: RDS Proxy closes idle
clients (``IdleClientTimeout``), and failovers and restarts close everything while the Lambda is
frozen. The local ``closed``/``broken`` flags only learn of it when a statement fails, so the
statements that are safe to repeat run through :func:`run_repeatable`, which retries once on a
fresh connection, both attempts inside one :func:`webhook_inbox.deadlines.deadline`.

In the stack's own network the host name is resolved here (:func:`webhook_inbox.network.addresses`)
and libpq is given the addresses as ``hostaddr``, the name staying ``host`` (TLS, and the IAM
token names it): libpq never tries an address the network would drop.

Where and how to connect is :class:`~webhook_inbox.settings.DatabaseSettings`, read once per
execution environment (:func:`settings`); the tools reset the settings before every command and
the tests before every case (:func:`webhook_inbox.config.reset`, also run by
:func:`reset_for_tests`), so either may point this module at another database between two.
The sign-in itself (``DATABASE_URL`` or the secret, and the re-read after a refused login) is
:mod:`webhook_inbox.store.credentials`; driver errors become ours in
:mod:`webhook_inbox.store.store_errors`.

:func:`connect` opens a :class:`Connection`: psycopg's, with two additions for the processor.
Inside :func:`handler_batch` its ``commit()`` and ``rollback()`` raise :class:`CommitRefused`, so
a handler cannot end the batch's transaction through the driver (the same sent as SQL is the
handler guard's business: :mod:`webhook_inbox.processing.handler_guard`); and while the guard
watches, it and its cursors note what may open a savepoint
(:mod:`webhook_inbox.store.savepoint_watch`), so the fast pass marks the transaction only after a
handler that may have left one open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.abc import Params, Query, QueryNoTemplate
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from webhook_inbox import config, deadlines, network
from webhook_inbox.errors import ConfigurationError, StoreCredentialsRejected, StoreUnavailable
from webhook_inbox.settings import DatabaseSettings
from webhook_inbox.store import credentials
from webhook_inbox.store.savepoint_watch import WatchingConnection
from webhook_inbox.store.store_errors import translate

R = TypeVar("R")


def settings() -> DatabaseSettings:
    """This execution environment's database settings, read once (:func:`config.current`)."""
    return config.current(DatabaseSettings)


def session_timeouts_ms() -> tuple[int, int]:
    """(statement_timeout, lock_timeout) in milliseconds, from the settings."""
    configured = settings()
    return configured.statement_timeout_ms, configured.lock_timeout_ms


def _send_startup_options(conninfo: str, mode: str) -> bool:
    """Whether timeouts can travel as startup ``options``.

    RDS Proxy refuses any connection that carries ``options`` ("RDS Proxy currently doesn't
    support command-line options"), and a SET would pin the session. Behind the proxy the
    timeouts are role defaults instead (:func:`set_role_timeouts`, run by ``migrate``).
    """
    mode = mode.lower()
    if mode in {"on", "true", "1"}:
        return True
    if mode in {"off", "false", "0"}:
        return False
    host = str(conninfo_to_dict(conninfo).get("host") or "")
    return ".proxy-" not in host


class CommitRefused(psycopg.ProgrammingError):
    """A handler called ``conn.commit()`` or ``conn.rollback()`` inside the processor's batch."""

    def __init__(self, call: str) -> None:
        super().__init__(
            f"Explicit {call}() forbidden within the processor's batch: its transaction ends"
            " with the batch (raise to fail the event)"
        )
        self.call = call


class HandlerCursor(psycopg.Cursor[TupleRow]):
    """The cursor of the processor's connection (``conn.execute``, ``conn.cursor()``;
    :func:`webhook_inbox.store.db.connect`): psycopg's, telling its connection, while the guard
    watches, about a statement that may open a savepoint."""

    def execute(  # type: ignore[override]
        self,
        query: QueryNoTemplate,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> HandlerCursor:
        conn = self.connection
        if isinstance(conn, WatchingConnection) and conn.watching:
            conn.note_statement(query)
        return super().execute(query, params, prepare=prepare, binary=binary)

    def executemany(
        self, query: Query, params_seq: Iterable[Params], *, returning: bool = False
    ) -> None:
        conn = self.connection
        if isinstance(conn, WatchingConnection) and conn.watching:
            conn.note_statement(query)
        super().executemany(query, params_seq, returning=returning)

    def stream(
        self,
        query: Query,
        params: Params | None = None,
        *,
        binary: bool | None = None,
        size: int = 1,
    ) -> Iterator[TupleRow]:
        conn = self.connection
        if isinstance(conn, WatchingConnection) and conn.watching:
            conn.note_statement(query)
        return super().stream(query, params, binary=binary, size=size)


class Connection(WatchingConnection):
    """psycopg's connection, refusing ``commit()`` and ``rollback()`` inside
    :func:`handler_batch` (the processor's passes), as psycopg refuses them inside
    ``conn.transaction()``, and noting, while the fast pass's guard watches, what may have
    opened a savepoint (:class:`~webhook_inbox.store.savepoint_watch.WatchingConnection`)."""

    _batch_open = False
    # The fast pass's pipeline, whose BEGIN psycopg may not have seen answered yet.
    _batch_pipeline: psycopg.Pipeline | None = None

    def commit(self) -> None:
        if self._batch_open:
            raise CommitRefused("commit")
        super().commit()

    def rollback(self) -> None:
        if self._batch_open:
            raise CommitRefused("rollback")
        super().rollback()

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        """A handler's nested block in the fast pass is a savepoint, as anywhere inside a
        transaction. psycopg chooses BEGIN or SAVEPOINT from the last status the server
        reported, and in pipeline mode that comes only with a sync: until the first one, the
        batch's BEGIN is unanswered and psycopg would open (and COMMIT) a transaction of its own.
        The sync costs a wait only when a handler nests a block (psycopg syncs there anyway
        when anything is still unanswered)."""
        if (
            self._batch_pipeline is not None
            and self.info.transaction_status != TransactionStatus.INTRANS
        ):
            self._batch_pipeline.sync()
        with super().transaction(savepoint_name, force_rollback) as tx:
            yield tx


@contextmanager
def handler_batch(conn: psycopg.Connection[Any], *, pipelined: bool = False) -> Iterator[None]:
    """Refuse ``conn.commit()`` and ``conn.rollback()`` (:class:`CommitRefused`) in the block,
    where the processor runs its handlers in one transaction of its own; ``pipelined``: the
    block is in pipeline mode (the fast pass, whose BEGIN goes unanswered until a sync)."""
    if not isinstance(conn, Connection):
        raise ConfigurationError("the processor's connection must come from store.db.connect")
    if conn._batch_open:
        raise ConfigurationError("a handler batch is already open on this connection")
    conn._batch_open = True
    try:
        if not pipelined:
            yield
            return
        with conn.pipeline() as pipeline:
            conn._batch_pipeline = pipeline
            yield
    finally:
        conn._batch_open, conn._batch_pipeline = False, None
        conn.stop_watching()


def with_host_addresses(conninfo: str) -> str:
    """``conninfo`` with ``hostaddr`` set to the addresses :func:`network.addresses` picks for
    its host (the host repeated once per address, as libpq pairs them); unchanged outside the
    stack's own network, for a Unix socket, an address, several hosts, a ``hostaddr`` already
    given, or a name that does not resolve (libpq reports it)."""
    if not network.ipv6_only():
        return conninfo
    params = conninfo_to_dict(conninfo)
    host = str(params.get("host") or "")
    port = str(params.get("port") or "5432")
    if not host or params.get("hostaddr") or "," in host + port or host.startswith("/"):
        return conninfo
    try:
        chosen = network.addresses(host, int(port))
    except (OSError, ValueError):
        return conninfo
    if not chosen or chosen == [host]:
        return conninfo
    return make_conninfo(conninfo, host=",".join([host] * len(chosen)), hostaddr=",".join(chosen))


def connect(conninfo: str, *, application_name: str = "webhook-inbox") -> psycopg.Connection[Any]:
    """Open a connection with bounded connect, statement and lock timeouts."""
    configured = settings()
    statement_ms, lock_ms = configured.statement_timeout_ms, configured.lock_timeout_ms
    extra: dict[str, Any] = {}
    with translate():
        if _send_startup_options(conninfo, configured.startup_options):
            extra["options"] = f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
        return Connection.connect(
            with_host_addresses(conninfo),
            connect_timeout=configured.connect_timeout_s,
            prepare_threshold=None,
            cursor_factory=HandlerCursor,
            application_name=application_name,
            # A dead peer must not hang a Lambda until its timeout (Linux TCP_USER_TIMEOUT);
            # statement_timeout cannot help when the server is unreachable.
            tcp_user_timeout=statement_ms + 2000,
            keepalives=1,
            keepalives_idle=30,
            **extra,
        )


def set_role_timeouts(
    conn: psycopg.Connection[Any],
    *,
    statement_ms: int | None = None,
    lock_ms: int | None = None,
) -> None:
    """Make the timeouts (default: this process's settings) the connecting role's defaults.

    For use behind RDS Proxy, which refuses per-connection options. Any role may set its own
    defaults; they apply to sessions opened afterwards.
    """
    configured_statement_ms, configured_lock_ms = session_timeouts_ms()
    statement_ms = configured_statement_ms if statement_ms is None else statement_ms
    lock_ms = configured_lock_ms if lock_ms is None else lock_ms
    if statement_ms <= 0 or lock_ms <= 0:
        raise ConfigurationError("role timeouts must be positive")
    with translate():
        conn.execute(
            sql.SQL("ALTER ROLE CURRENT_USER SET statement_timeout = {}").format(
                sql.Literal(statement_ms)
            )
        )
        conn.execute(
            sql.SQL("ALTER ROLE CURRENT_USER SET lock_timeout = {}").format(sql.Literal(lock_ms))
        )


def answer_deadline_s() -> float:
    """How long one statement may go unanswered: the server's statement timeout, plus a second
    for the server to report it."""
    statement_ms, _ = session_timeouts_ms()
    return statement_ms / 1000 + 1.0


# --- the process-wide connection ---------------------------------------------------------

_connection: psycopg.Connection[Any] | None = None
# Whether _connection has already answered a statement: only such a connection can have gone
# stale while the function was frozen (one that never worked is a fresh connection's failure).
_proven = False


def current_connection() -> psycopg.Connection[Any] | None:
    """The process's connection as it is now, without opening one (what a deadline cuts)."""
    return _connection


def get_connection(application_name: str = "webhook-inbox") -> psycopg.Connection[Any]:
    """The process's connection: opened on first use, re-opened if it was closed or broke."""
    global _connection, _proven  # one connection per execution environment, by design
    conn = _connection
    if conn is not None and not conn.closed and not conn.broken:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            with translate():
                conn.rollback()
        return conn
    _connection, _proven = _open(application_name), False
    return _connection


def _open(application_name: str) -> psycopg.Connection[Any]:
    """A new connection; a refused login re-reads a rotated secret and tries once more."""
    try:
        return connect(credentials.database_conninfo(settings()), application_name=application_name)
    except StoreCredentialsRejected:
        if not credentials.reread_secret_after_refusal(settings()):
            raise
    return connect(credentials.database_conninfo(settings()), application_name=application_name)


def run_repeatable(
    work: Callable[[psycopg.Connection[Any]], R], *, application_name: str = "webhook-inbox"
) -> tuple[R, bool]:
    """Run ``work`` (autocommit statements, each safe to repeat: ingest's claim) on the process
    connection.

    If it fails because a connection kept from an earlier call turned out dead, run it once more
    on a fresh connection. Returns ``(result, retried)``. A retried statement may have run twice:
    when the connection dropped after the server received it, the first run may have committed.

    Never retried: a failure on a connection that has not answered a statement yet (the
    database itself is in trouble, and a retry would double the wait), a failure that left the
    connection usable (a timeout, a constraint), a connection cut by its deadline (the
    database did not answer), and any statement inside a transaction (what the transaction did
    before is lost with the connection, so repeating the last statement would not redo it).
    Both attempts together have :func:`answer_deadline_s`.
    """
    global _proven  # noqa: PLW0603 - see _proven
    # Both attempts together get one statement's answer deadline (deadlines.deadline).
    with deadlines.deadline(answer_deadline_s(), current_connection):
        conn = get_connection(application_name)
        kept = _proven
        repeatable = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if repeatable:
            conn.autocommit = True
        try:
            result = work(conn)
        except StoreUnavailable:
            if not (kept and repeatable and conn.broken) or deadlines.deadline_passed():
                raise
        else:
            _proven = True
            return result, False
        discard_connection()
        fresh = get_connection(application_name)
        fresh.autocommit = True
        result = work(fresh)
        _proven = True
        return result, True


def discard_connection() -> None:
    """Drop the process's connection after a failure so the next call opens a fresh one."""
    global _connection
    conn, _connection = _connection, None
    if conn is not None:
        # Closing a broken connection may itself fail; it is gone either way.
        with suppress(psycopg.Error):
            conn.close()


def reset_for_tests() -> None:
    """Forget the cached connection, secrets and settings: the one reset of everything
    database-related (tests switch databases between cases)."""
    discard_connection()
    credentials.forget_secrets()
    config.reset()
