"""Database connections and the single mapping of driver errors onto our hierarchy.

One connection per process (one per Lambda execution environment), opened lazily and
re-opened after a failure. ``prepare_threshold=None`` keeps psycopg from creating server-side
prepared statements, which would pin sessions behind RDS Proxy.

A connection kept across invocations can be dead without knowing it: RDS Proxy closes idle
clients (``IdleClientTimeout``), and failovers and restarts close everything while the Lambda is
frozen. The local ``closed``/``broken`` flags only learn of it when a statement fails, so the
statements that are safe to repeat run through :func:`run_repeatable`, which retries once on a
fresh connection.

Where and how to connect is :class:`DatabaseSettings`, read when a connection is opened: in a
function that is once per execution environment (again only after a dead connection); the
tools and the tests, which share this module, may point it at another database between two.

A database that accepts and never answers (RDS Proxy holding a statement through a failover, a
path whose far end is gone while something in between still acknowledges) is bounded by nothing
the server enforces: the statement timeout never starts, and TCP_USER_TIMEOUT cannot fire while
the bytes are acknowledged. :func:`deadline` bounds the wait on our side: when a block has not
finished in time, it shuts the connection's socket, and the waiting call fails at once.

Credentials come from ``DATABASE_URL`` or the RDS-shaped secret ``DATABASE_SECRET_ARN``, cached
five minutes (the last good value is kept while Secrets Manager cannot be read). When the
database refuses a login — a rotation changed the password, or switched to the other user — the
secret is re-read once and the connection tried again, at most once a minute, so a broken
configuration cannot turn every request into a Secrets Manager call.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar
from urllib.parse import quote

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from webhook_inbox import aws
from webhook_inbox.config import load, setting
from webhook_inbox.errors import (
    ConfigurationError,
    SecretUnavailable,
    StoreConflict,
    StoreCredentialsRejected,
    StoreError,
    StoreLockTimeout,
    StoreUnavailable,
)

P = ParamSpec("P")
R = TypeVar("R")

# Bounded waits everywhere: a webhook provider gives us seconds, not minutes.
DEFAULT_CONNECT_TIMEOUT_S = 3
DEFAULT_STATEMENT_TIMEOUT_MS = 5000
DEFAULT_LOCK_TIMEOUT_MS = 2000

_SECRET_TTL_S = 300.0
# A refused login re-reads the database secret at most this often (as for provider secrets).
FORCED_SECRET_REFRESH_INTERVAL_S = 60.0

# libpq reports a refused login as text only (no SQLSTATE reaches the client for a failed
# startup): 28P01 "password authentication failed", 28000 "role … is not permitted to log in" /
# "role … does not exist", and IAM authentication's "PAM authentication failed".
_CREDENTIALS_REJECTED = re.compile(
    r"password authentication failed|PAM authentication failed|"
    r'role ".*" (?:is not permitted to log in|does not exist)'
)


@dataclass(frozen=True)
class DatabaseSettings:
    """Where the database is, how to sign in, and the bounded waits of every connection."""

    url: str = setting("DATABASE_URL", "")
    secret_arn: str = setting("DATABASE_SECRET_ARN", "")
    iam_auth: bool = setting("DATABASE_IAM_AUTH", False)
    # Beside an RDS-managed `rds!` secret, which holds only the username and password.
    host: str = setting("DATABASE_HOST", "")
    port: str = setting("DATABASE_PORT", "")
    name: str = setting("DATABASE_NAME", "")
    connect_timeout_s: int = setting("DB_CONNECT_TIMEOUT_S", DEFAULT_CONNECT_TIMEOUT_S)
    statement_timeout_ms: int = setting("DB_STATEMENT_TIMEOUT_MS", DEFAULT_STATEMENT_TIMEOUT_MS)
    lock_timeout_ms: int = setting("DB_LOCK_TIMEOUT_MS", DEFAULT_LOCK_TIMEOUT_MS)
    startup_options: str = setting("DB_STARTUP_OPTIONS", "auto")


def settings() -> DatabaseSettings:
    return load(DatabaseSettings)


@contextmanager
def translate() -> Iterator[None]:
    """Map psycopg errors onto the project's hierarchy. The only place that knows psycopg's."""
    try:
        yield
    except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
        raise StoreConflict(type(exc).__name__) from exc
    except pg_errors.LockNotAvailable as exc:
        raise StoreLockTimeout(type(exc).__name__) from exc
    except psycopg.OperationalError as exc:
        if exc.sqlstate is None and _CREDENTIALS_REJECTED.search(str(exc)):
            raise StoreCredentialsRejected(type(exc).__name__) from exc
        # Connection refused/lost, admin shutdown, statement timeout (QueryCanceled is an
        # OperationalError): all transient from the caller's point of view.
        raise StoreUnavailable(type(exc).__name__) from exc
    except psycopg.InterfaceError as exc:  # a connection closed or broken on our side
        raise StoreUnavailable(type(exc).__name__) from exc
    except psycopg.Error as exc:
        if exc.sqlstate is None:
            # Refused by psycopg itself (a handler's commit() inside the batch's transaction):
            # its own words, which hold no data, say more than "None".
            lines = str(exc).strip().splitlines() or [""]
            raise StoreError(f"{type(exc).__name__}: {lines[0][:200]}") from exc
        # A server error's message may quote data (a key's value): only its SQLSTATE.
        raise StoreError(f"{type(exc).__name__}: {exc.sqlstate}") from exc


def translated(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of :func:`translate` for data-layer functions."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with translate():
            return func(*args, **kwargs)

    return wrapper


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


def connect(conninfo: str, *, application_name: str = "webhook-inbox") -> psycopg.Connection[Any]:
    """Open a connection with bounded connect, statement and lock timeouts."""
    configured = settings()
    statement_ms, lock_ms = configured.statement_timeout_ms, configured.lock_timeout_ms
    extra: dict[str, Any] = {}
    with translate():
        if _send_startup_options(conninfo, configured.startup_options):
            extra["options"] = f"-c statement_timeout={statement_ms} -c lock_timeout={lock_ms}"
        return psycopg.connect(
            conninfo,
            connect_timeout=configured.connect_timeout_s,
            prepare_threshold=None,
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


# --- credentials -------------------------------------------------------------------------

_secret_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_secret_last_forced: dict[str, float] = {}
_secret_lock = threading.Lock()


def _fetch_secret(arn: str) -> dict[str, Any]:
    from botocore.exceptions import BotoCoreError, ClientError  # deferred, as boto3 is

    try:
        raw = aws.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
    except (BotoCoreError, ClientError, KeyError) as exc:
        raise SecretUnavailable(f"cannot read database secret: {aws.error_code(exc)}") from exc
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigurationError("database secret is not JSON") from None
    if not isinstance(value, dict):
        raise ConfigurationError("database secret must be a JSON object")
    return value


def _read_secret(arn: str) -> dict[str, Any]:
    with _secret_lock:
        cached = _secret_cache.get(arn)
        if cached and time.monotonic() - cached[0] < _SECRET_TTL_S:
            return cached[1]
        try:
            value = _fetch_secret(arn)
        except SecretUnavailable:
            if cached:  # keep connecting with the last good value while Secrets Manager is out
                return cached[1]
            raise
        _secret_cache[arn] = (time.monotonic(), value)
        return value


def _reread_secret_after_refusal() -> bool:
    """Re-read the database secret now (a login was refused); whether it changed.

    At most once a minute per secret: a refusal that a re-read cannot cure (a disabled user, a
    secret rotated wrongly) must not cost a Secrets Manager call per request.
    """
    configured = settings()
    arn = configured.secret_arn
    if configured.url or not arn:
        return False
    with _secret_lock:
        now = time.monotonic()
        last = _secret_last_forced.get(arn)
        if last is not None and now - last < FORCED_SECRET_REFRESH_INTERVAL_S:
            return False
        _secret_last_forced[arn] = now
        try:
            value = _fetch_secret(arn)
        except SecretUnavailable:
            return False  # keep the cached value; the caller reports the refusal
        cached = _secret_cache.get(arn)
        _secret_cache[arn] = (now, value)
        return cached is None or cached[1] != value


def conninfo_from_rds_secret(secret: dict[str, Any], *, password: str | None = None) -> str:
    """Build a libpq URI from the RDS secret JSON shape (username, password, host, port, dbname)."""
    try:
        user = str(secret["username"])
        host = str(secret["host"])
    except KeyError as missing:
        raise ConfigurationError(f"database secret lacks {missing.args[0]!r}") from None
    port = int(secret.get("port", 5432))
    dbname = str(secret.get("dbname", "postgres"))
    pw = password if password is not None else str(secret.get("password", ""))
    return (
        f"postgresql://{quote(user, safe='')}:{quote(pw, safe='')}@{host}:{port}/"
        f"{quote(dbname, safe='')}?sslmode={secret.get('sslmode', 'require')}"
    )


def _iam_token(host: str, port: int, user: str) -> str:
    token: str = aws.client("rds").generate_db_auth_token(
        DBHostname=host, Port=port, DBUsername=user
    )
    return token


def _with_location_overrides(
    secret: dict[str, Any], configured: DatabaseSettings
) -> dict[str, Any]:
    """The secret, with ``DATABASE_HOST`` / ``DATABASE_PORT`` / ``DATABASE_NAME`` where set.

    An RDS-managed ``rds!`` secret holds only the username and password, so the deploy passes
    where to connect beside it.
    """
    located = dict(secret)
    for value, key in (
        (configured.host, "host"),
        (configured.port, "port"),
        (configured.name, "dbname"),
    ):
        if value:
            located[key] = value
    return located


def database_conninfo() -> str:
    """Where to connect: ``DATABASE_URL``, else the RDS-shaped secret ``DATABASE_SECRET_ARN``.

    With ``DATABASE_IAM_AUTH=true`` the secret's password is replaced by an IAM auth token
    (valid 15 minutes; a new one is made for every new connection).
    """
    configured = settings()
    if configured.url:
        return configured.url
    if not configured.secret_arn:
        raise ConfigurationError("set DATABASE_URL or DATABASE_SECRET_ARN")
    secret = _with_location_overrides(_read_secret(configured.secret_arn), configured)
    if configured.iam_auth:
        host = str(secret.get("host", ""))
        port = int(secret.get("port", 5432))
        token = _iam_token(host, port, str(secret.get("username", "")))
        return conninfo_from_rds_secret(secret, password=token)
    return conninfo_from_rds_secret(secret)


# --- deadlines ----------------------------------------------------------------------------


@dataclass(eq=False)
class Deadline:
    """One :func:`deadline` block: when it runs out, and whether it did (and cut its connection)."""

    conn: psycopg.Connection[Any] | None  # None: the process connection when time runs out
    expires_at: float  # time.monotonic()
    fired: bool = False


class _Watchdog:
    """The one thread that cuts the connection of every :func:`deadline` block that runs out.

    Started on first use and then waiting, mostly for nothing: a thread per block
    (``threading.Timer``) cost about 0.3 ms of every ingest delivery, a quarter of its time on a
    local database. A block that ends is forgotten under the same lock the thread fires under,
    so a finished block is never cut.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._blocks: list[Deadline] = []
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf

    def watch(self, block: Deadline) -> None:
        with self._cond:
            self._blocks.append(block)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="db-deadlines", daemon=True)
                self._thread.start()
            elif block.expires_at < self._wakes_at:
                self._cond.notify()

    def forget(self, block: Deadline) -> None:
        with self._cond:
            self._blocks.remove(block)

    def any_fired(self) -> bool:
        with self._cond:
            return any(block.fired for block in self._blocks)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for block in self._blocks:
                    if not block.fired and block.expires_at <= now:
                        block.fired = True
                        _sever(block.conn if block.conn is not None else _connection)
                waiting = [b.expires_at for b in self._blocks if not b.fired]
                self._wakes_at = min(waiting, default=math.inf)
                self._cond.wait(self._wakes_at - now if waiting else None)


_watchdog = _Watchdog()


def _sever(conn: psycopg.Connection[Any] | None) -> None:
    """Shut the connection's socket (from another thread): every wait on it ends in an error.

    shutdown() acts on the socket, not on our duplicate descriptor, and leaves libpq's own
    descriptor open for it to close.
    """
    if conn is None or conn.closed:
        return
    with suppress(psycopg.Error, OSError):
        duplicate = os.dup(conn.pgconn.socket)
        with socket.socket(fileno=duplicate) as sock:
            sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def deadline(seconds: float, conn: psycopg.Connection[Any] | None = None) -> Iterator[Deadline]:
    """Give the database work in the block ``seconds`` at most, on our side of the network.

    On time, nothing happens. Late, the connection (``conn``, else the process connection) is
    cut and the call waiting on it raises ``StoreUnavailable``; :func:`run_repeatable` does not
    retry after that (the database is not answering; a fresh connection would wait as long).
    """
    block = Deadline(conn, time.monotonic() + max(seconds, 0.0))
    _watchdog.watch(block)
    try:
        yield block
    finally:
        _watchdog.forget(block)


def deadline_passed() -> bool:
    """Whether a :func:`deadline` around the current work has run out."""
    return _watchdog.any_fired()


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
        return connect(database_conninfo(), application_name=application_name)
    except StoreCredentialsRejected:
        if not _reread_secret_after_refusal():
            raise
    return connect(database_conninfo(), application_name=application_name)


def run_repeatable(
    work: Callable[[psycopg.Connection[Any]], R], *, application_name: str = "webhook-inbox"
) -> tuple[R, bool]:
    """Run ``work`` (one autocommit statement that is safe to repeat) on the process connection.

    If it fails because a connection kept from an earlier call turned out dead, run it once more
    on a fresh connection. Returns ``(result, retried)``. A retried statement may have run twice:
    when the connection dropped after the server received it, the first run may have committed.

    Never retried: a failure on a connection that has not answered a statement yet (the
    database itself is in trouble, and a retry would double the wait), a failure that left the
    connection usable (a timeout, a constraint), a connection cut by a :func:`deadline` (the
    database did not answer), and any statement inside a transaction (what the transaction did
    before is lost with the connection, so repeating the last statement would not redo it).
    Both attempts together have :func:`answer_deadline_s`.
    """
    global _proven  # noqa: PLW0603 - see _proven
    # Both attempts together get one statement's answer deadline (:func:`deadline`).
    with deadline(answer_deadline_s()):
        conn = get_connection(application_name)
        kept = _proven
        repeatable = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if repeatable:
            conn.autocommit = True
        try:
            result = work(conn)
        except StoreUnavailable:
            if not (kept and repeatable and conn.broken) or deadline_passed():
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
    """Forget cached connection and secrets (tests switch databases between cases)."""
    discard_connection()
    with _secret_lock:
        _secret_cache.clear()
        _secret_last_forced.clear()
