"""Opening the operator's database connection, with errors that say what to do."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from psycopg import Connection, ProgrammingError
from psycopg.conninfo import conninfo_to_dict

from webhook_inbox.errors import ConfigurationError, StoreUnavailable
from webhook_inbox.store import credentials, db
from webhook_inbox.store.migrate import applied_versions, available_migrations
from webhook_inbox_tools.cli.params import mask_conninfo

HOW_TO_SET = (
    "set DATABASE_URL (e.g. export DATABASE_URL=postgresql://user:password@host:5432/dbname), "
    "pass --database-url, or set DATABASE_SECRET_ARN to the RDS secret"
)


class DatabaseUnreachable(StoreUnavailable):
    """The CLI could not open its connection; the message names the (masked) target."""

    def __init__(self, target: str, source: str, cause: str) -> None:
        super().__init__(
            f"cannot reach the database at {target} (from {source}): {cause}\n  {HOW_TO_SET}"
        )


def add_database_option(parser: argparse._ActionsContainer) -> None:  # a parser, or a group
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="libpq URL (default: $DATABASE_URL, else the secret in $DATABASE_SECRET_ARN)",
    )


def _resolve(args: argparse.Namespace) -> tuple[str, str]:
    if getattr(args, "database_url", None):
        return args.database_url, "--database-url"
    configured = db.settings()
    if configured.url:
        return configured.url, "DATABASE_URL"
    if not configured.secret_arn:
        raise ConfigurationError(f"no database configured: {HOW_TO_SET}")
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return credentials.database_conninfo(configured), f"the secret {configured.secret_arn}"
    except (BotoCoreError, ClientError) as exc:
        raise ConfigurationError(
            f"cannot read the database secret {configured.secret_arn}: {exc}"
        ) from None


def _cause(exc: BaseException) -> str:
    """The driver's first line (e.g. "connection refused"); never contains the password."""
    cause = exc.__cause__ or exc
    text = str(cause).strip().splitlines()
    return text[0] if text else type(cause).__name__


def open_connection(args: argparse.Namespace, *, require_schema: bool = True) -> Connection[Any]:
    """An autocommit connection (each operator write is its own explicit transaction)."""
    conninfo, source = _resolve(args)
    try:
        conninfo_to_dict(conninfo)
    except ProgrammingError:  # not echoed: it may hold a password
        raise ConfigurationError(
            f"{source} is not a PostgreSQL URL or conninfo string (e.g. "
            "postgresql://user:password@host:5432/dbname)"
        ) from None
    try:
        conn = db.connect(conninfo, application_name="webhook-inbox-cli")
    except StoreUnavailable as exc:
        raise DatabaseUnreachable(mask_conninfo(conninfo), source, _cause(exc)) from exc
    conn.autocommit = True
    if require_schema:
        applied = set(applied_versions(conn))
        if not applied:
            conn.close()
            raise ConfigurationError(
                f"the database at {mask_conninfo(conninfo)} has no webhook-inbox schema; "
                "run `webhook-inbox migrate` first"
            )
        pending = [m.version for m in available_migrations() if m.version not in applied]
        if pending:
            print(
                f"warning: migrations {', '.join(pending)} are not applied; "
                "run `webhook-inbox migrate`",
                file=sys.stderr,
            )
    return conn
