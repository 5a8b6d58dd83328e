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
        if exc.sqlstate == LEASE_LOST_SQLSTATE:
            detail = exc.diag.message_detail or ""
            rows = frozenset(int(r) for r in detail.split(",") if r.isdigit())
            raise LeaseLost(f"{len(rows)} rows are no longer leased", rows) from exc
        if exc.sqlstate is None:
            # Refused by psycopg itself (a handler's commit() inside the batch's transaction):
            # its own words, which hold no data, say more than "None".
            lines = str(exc).strip().splitlines() or [""]
            raise StoreError(f"{type(exc).__name__}: {lines[0][:200]}") from exc
        # A server error's message may quote data (a key's value): only its SQLSTATE.
        raise StoreError(f"{type(exc).__name__}: {exc.sqlstate}") from exc


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
        with translate():
            return func(*args, **kwargs)

    return wrapper
