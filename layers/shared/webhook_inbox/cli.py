"""The ``webhook-inbox`` command line. Subcommands: migrate (more arrive with the CLI issue)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from webhook_inbox import db
from webhook_inbox.errors import ConfigurationError, StoreError, WebhookInboxError
from webhook_inbox.migrate import available_migrations, migrate


def _cmd_migrate(args: argparse.Namespace) -> int:
    conninfo = args.database_url or db.database_conninfo()
    with db.connect(conninfo, application_name="webhook-inbox-migrate") as conn:
        applied = migrate(conn)
        if args.role_timeouts:
            db.set_role_timeouts(conn)
            conn.commit()
            print("statement and lock timeouts set as the role's defaults")
    total = len(available_migrations())
    if applied:
        print(f"applied {len(applied)} migration(s): {', '.join(applied)} ({total} known)")
    else:
        print(f"schema is up to date ({total} migration(s) applied)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="webhook-inbox", description="Operate an idempotent webhook inbox."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p_migrate = sub.add_parser("migrate", help="apply pending schema migrations")
    p_migrate.add_argument(
        "--database-url",
        help="libpq URL (default: $DATABASE_URL, else the secret in $DATABASE_SECRET_ARN)",
    )
    p_migrate.add_argument(
        "--role-timeouts",
        action="store_true",
        help="also store DB_STATEMENT_TIMEOUT_MS / DB_LOCK_TIMEOUT_MS as the role's defaults "
        "(needed behind RDS Proxy, which refuses per-connection options)",
    )
    p_migrate.set_defaults(func=_cmd_migrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(
            f"error: database unavailable ({exc}); check DATABASE_URL or DATABASE_SECRET_ARN",
            file=sys.stderr,
        )
        return 3
    except WebhookInboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
