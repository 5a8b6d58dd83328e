"""``webhook-inbox psql``: into the running ``webhook-inbox dev``'s database, to look at the
tables a handler writes (and the inbox's own).

It opens ``psql`` on the database of the dev running from this folder (the URL is in the
environment file dev writes, ``.webhook-inbox-dev.env``); ``--url`` prints the URL instead, for
any other client; arguments after ``--`` go to psql (``-- -c 'SELECT * FROM customers'``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.dev.env_file import DEFAULT_ENV_FILE, running_dev_environment

DESCRIPTION = (
    "Open psql on the database of the webhook-inbox dev running from this folder (your "
    "handlers' tables, webhook_events, outbox_messages); --url prints its URL for any other "
    "client. Arguments after -- go to psql: webhook-inbox psql -- -c 'TABLE customers'."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", action="store_true", help="print the database URL and exit")
    parser.add_argument(
        "psql_args", nargs=argparse.REMAINDER, metavar="-- PSQL_ARGS", help="passed to psql"
    )


def cmd_psql(args: argparse.Namespace) -> int:
    url = running_dev_environment().get("DATABASE_URL", "")
    if not url:
        raise ConfigurationError(
            f"no webhook-inbox dev is running from this folder (no live {DEFAULT_ENV_FILE}): "
            "start one with `webhook-inbox dev`, then run this from the same folder"
        )
    if args.url:
        print(url)
        return 0
    extra = args.psql_args[1:] if args.psql_args[:1] == ["--"] else args.psql_args
    psql = shutil.which("psql")
    if psql is None:
        raise ConfigurationError(
            "psql is not installed (Debian/Ubuntu: apt install postgresql-client; macOS: brew "
            f"install libpq); any PostgreSQL client takes the URL: {url}"
        )
    sys.stdout.flush()
    os.execv(psql, [psql, url, *extra])  # noqa: S606 - psql found on PATH, the dev's own URL
    return 0  # not reached
