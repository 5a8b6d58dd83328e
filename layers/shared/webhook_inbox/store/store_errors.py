"""The one mapping of the driver's errors onto our hierarchy (``errors.py``).

Every database call that can fail runs inside :func:`translate` (or a :func:`translated`
function), so its callers see ``StoreError`` and its kinds, never psycopg's classes; no other
module turns a driver error into one of ours.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import ParamSpec, TypeVar

import psycopg
from psycopg import errors as pg_errors

from webhook_inbox.errors import (
    LeaseLost,
    StoreConflict,
    StoreCredentialsRejected,
    StoreError,
    StoreLockTimeout,
    StoreStatementTimeout,
    StoreUnavailable,
)

P = ParamSpec("P")
R = TypeVar("R")

# libpq reports a refused login as text only (no SQLSTATE reaches the client for a failed
# startup): 28P01 "password authentication failed", 28000 "role … is not permitted to log in" /
# "role … does not exist", and IAM authentication's "PAM authentication failed".
_CREDENTIALS_REJECTED = re.compile(
    r"password authentication failed|PAM authentication failed|"
    r'role ".*" (?:is not permitted to log in|does not exist)'
)

# Raised by webhook_inbox_require_marked (migration 0008) inside the fast pass's batched mark:
# some of the rows it was given are no longer leased to the worker; its DETAIL lists them.
LEASE_LOST_SQLSTATE = "WI001"


def as_store_error(exc: psycopg.Error) -> StoreError:
    """The project's error for a driver error: the only place that knows psycopg's classes."""
    name = type(exc).__name__
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)):
        return StoreConflict(name)
    if isinstance(exc, pg_errors.LockNotAvailable):
        return StoreLockTimeout(name)
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return _unavailable(exc)
    if exc.sqlstate == LEASE_LOST_SQLSTATE:
        detail = exc.diag.message_detail or ""
        rows = frozenset(int(r) for r in detail.split(",") if r.isdigit())
        return LeaseLost(f"{len(rows)} rows are no longer leased", rows)
    if exc.sqlstate is None:
        # Refused by psycopg itself (a handler's commit() inside the batch's transaction):
        # its own words, which hold no data, say more than "None".
        lines = str(exc).strip().splitlines() or [""]
        return StoreError(f"{name}: {lines[0][:200]}")
    # A server error's message may quote data (a key's value): only its SQLSTATE.
    return StoreError(f"{name}: {exc.sqlstate}")


def _unavailable(exc: psycopg.Error) -> StoreError:
    """An OperationalError: connection refused/lost, admin shutdown, statement timeout
    (QueryCanceled is one), all transient from the caller's point of view, or a refused login;
    or an InterfaceError: a connection closed or broken on our side."""
    if (
        isinstance(exc, psycopg.OperationalError)
        and exc.sqlstate is None
        and _CREDENTIALS_REJECTED.search(str(exc))
    ):
        return StoreCredentialsRejected(type(exc).__name__)
    return StoreUnavailable(type(exc).__name__)


class _Translate:
    """The context manager :func:`translate` returns. A class, not ``@contextmanager``: the
    processor enters one about 25 times per batch of 10, and the generator-based one cost
    2.5 % of its client CPU (instructions counted over bench/processing_throughput.py's batch)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, psycopg.Error):
            raise as_store_error(exc) from exc


_TRANSLATE = _Translate()


def translate() -> _Translate:
    """Map psycopg errors raised in the ``with`` block onto the project's hierarchy
    (:func:`as_store_error`); anything else passes through unchanged."""
    return _TRANSLATE


@contextmanager
def bounded_statement() -> Iterator[None]:
    """Around a statement whose statement timeout is its caller's own bound (a long scan given
    what is left of a run), not a sign of a database in trouble: its cancellation is
    :class:`StoreStatementTimeout`; every other error as :func:`translate` maps it."""
    try:
        yield
    except pg_errors.QueryCanceled as exc:
        raise StoreStatementTimeout(type(exc).__name__) from exc


def translated(func: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of :func:`translate` for data-layer functions."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except psycopg.Error as exc:
            raise as_store_error(exc) from exc

    return wrapper
