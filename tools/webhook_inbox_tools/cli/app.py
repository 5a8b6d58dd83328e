"""The ``webhook-inbox`` command line: the parser, and the one place errors become exit codes.

Exit codes scripts can trust: 0 success; 1 an operational failure (something refused, not found,
or a confirmation declined); 2 a usage or configuration error; 3 the database is unreachable;
141 the reader of the output went away (`| head`: nothing is printed about it).
Expected errors print one ``error:`` line (plus a hint) to stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from webhook_inbox import config
from webhook_inbox.errors import (
    ConfigurationError,
    OperatorRequestRefused,
    StoreError,
    StoreUnavailable,
    WebhookInboxError,
)
from webhook_inbox.store import db
from webhook_inbox.store.migrate import available_migrations, migrate
from webhook_inbox_tools.cli import actions, inspect_events, pausing, preflight, signing, trigger
from webhook_inbox_tools.cli import console as console_command
from webhook_inbox_tools.cli import dev as dev_command
from webhook_inbox_tools.cli import invoke as invoke_command
from webhook_inbox_tools.cli import policy as policy_command
from webhook_inbox_tools.cli import providers as providers_command
from webhook_inbox_tools.cli import psql as psql_command
from webhook_inbox_tools.cli.database import (
    DatabaseUnreachable,
    add_database_option,
    open_connection,
)
from webhook_inbox_tools.cli.operator_remote import RemoteCallFailed
from webhook_inbox_tools.cli.params import positive_int, reason_text, when
from webhook_inbox_tools.handler_lab import check as check_handlers

APPLICATION_PACKAGE = "webhook_inbox_app"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
# What a shell reports for a program its reader stopped (`| head`): 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141
# What to do about the AWS client failures a laptop meets and a Lambda function never does.
AWS_SETUP_HINTS = {
    "NoRegionError": "no AWS region is configured: set AWS_REGION or AWS_DEFAULT_REGION",
    "NoCredentialsError": "no AWS credentials: set AWS_PROFILE or configure the AWS CLI",
    "ProfileNotFound": "AWS_PROFILE names a profile the AWS configuration does not have",
}


def _cmd_migrate(args: argparse.Namespace) -> int:
    with open_connection(args, require_schema=False) as conn:
        # The runtime's tables first, then the application's (which may refer to them).
        applied = migrate(conn) + migrate(conn, package=APPLICATION_PACKAGE)
        if args.role_timeouts:
            db.set_role_timeouts(conn)
            conn.commit()
            print("statement and lock timeouts stored as the role's defaults")
    total = len(available_migrations()) + len(available_migrations(APPLICATION_PACKAGE))
    if applied:
        print(f"applied {len(applied)} migration(s): {', '.join(applied)} ({total} known)")
    else:
        print(f"schema is up to date ({total} migration(s) applied)")
    return 0


def _common(*, json_output: bool, stack: bool = False) -> argparse.ArgumentParser:
    """The options every command of a kind takes; ``stack``: an operator command, which runs
    on a database (--database-url) or through a stack's operator function (--stack)."""
    parent = argparse.ArgumentParser(add_help=False)
    if stack:
        where = parent.add_mutually_exclusive_group()
        add_database_option(where)
        where.add_argument(
            "--stack",
            metavar="STACK",
            help="run it through this deployed stack's operator function (your AWS "
            "credentials; no network path to the database needed)",
        )
        parent.add_argument(
            "--region", help="--stack's AWS region (default: AWS_REGION, else your profile's)"
        )
    else:
        add_database_option(parent)
    if json_output:
        parent.add_argument("--json", action="store_true", help="print JSON for scripts")
    return parent


def _add_action_options(parser: argparse.ArgumentParser, *, what: str) -> None:
    parser.add_argument(
        "--reason",
        required=True,
        type=reason_text,
        help="why (recorded in the audit table operator_actions)",
    )
    parser.add_argument(
        "--operator",
        help="who is acting (default: $USER, else the login name @ host name); not with "
        "--stack, where the audit records your AWS principal",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help=f"show what would be {what}; write nothing"
    )
    parser.add_argument(
        "--yes", "-y", action="store_true", help="do not ask for confirmation of a filtered set"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="webhook-inbox",
        description="Run, inspect and repair an idempotent webhook inbox.",
        epilog="exit codes: 0 ok, 1 operational failure, 2 usage/configuration error, "
        "3 database unreachable, 141 the reader of the output went away (| head)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    reads = _common(json_output=True, stack=True)
    writes = _common(json_output=True, stack=True)
    plain = _common(json_output=False)

    p = sub.add_parser(
        "migrate",
        parents=[plain],
        help="apply pending schema migrations",
        description="Apply the runtime's migrations, then your application's (application/), "
        "each in its own transaction with a short lock timeout so live writes never wait "
        "behind it. Safe to run twice and from several places at once; prints what it applied.",
    )
    p.add_argument(
        "--role-timeouts",
        action="store_true",
        help="also store DB_STATEMENT_TIMEOUT_MS / DB_LOCK_TIMEOUT_MS as the role's defaults "
        "(needed behind RDS Proxy, which refuses per-connection options)",
    )
    p.set_defaults(func=_cmd_migrate)

    p = sub.add_parser(
        "status",
        parents=[reads],
        help="event counts per status, oldest ages, leases, outbox backlog",
        description="One look at the inbox: events per status with the oldest of each, the "
        "oldest unfinished event, live and expired leases, and the outbox's pending and dead "
        "messages. Reads only.",
    )
    p.set_defaults(func=inspect_events.cmd_status)

    events = sub.add_parser("events", help="list and inspect inbox events")
    events_sub = events.add_subparsers(dest="events_command", required=True, metavar="COMMAND")
    p = events_sub.add_parser(
        "list",
        parents=[reads],
        help="list events, newest first, a page at a time",
        description="List events newest first, filtered by status, provider, type and time, "
        "a page at a time (--cursor continues where the last page stopped).",
    )
    inspect_events.add_event_filters(p)
    inspect_events.add_paging(p)
    p.set_defaults(func=inspect_events.cmd_events_list)
    p = events_sub.add_parser(
        "show",
        parents=[reads],
        help="one event: state, attempts, timestamps, audit trail",
        description="Show one event, named by its event id or by the delivery id its provider "
        "shows (X-GitHub-Delivery, X-Shopify-Webhook-Id, ...): state, attempts, timestamps "
        "and the operator actions taken on it.",
    )
    p.add_argument("provider", metavar="PROVIDER", help="the provider's name in the inbox")
    p.add_argument(
        "event_id", metavar="ID", help="the event id, or the provider's delivery id for it"
    )
    p.add_argument(
        "--payload",
        action="store_true",
        help="also print the stored payload (through an operator function: the act level, "
        "which logs who read it)",
    )
    p.set_defaults(func=inspect_events.cmd_events_show)
    p = events_sub.add_parser(
        "rejected",
        parents=[_common(json_output=True)],  # dev's own table: a database, never --stack
        help="the deliveries webhook-inbox dev refused, newest first (dev only)",
        description="The deliveries a webhook-inbox dev answered other than 2xx, newest first: "
        "when, provider, status, reason, detail and delivery id (never a body or a secret). "
        "A deployed stack keeps these as its Rejected metric and ingest's log lines instead.",
    )
    p.add_argument("--provider", help="only this provider's")
    p.add_argument("--since", type=when, default=None, help="from this time (default: 24 h ago)")
    p.add_argument("--limit", type=positive_int, default=50, help="at most this many (default 50)")
    p.set_defaults(func=inspect_events.cmd_events_rejected)

    p = sub.add_parser(
        "replay",
        parents=[writes],
        help="send events through the queue and handler again (audited)",
        description="Reset events to 'received' (attempts back to 0; the audit row keeps the "
        "old attempts and error) and send them to the processing queue, so they take the same "
        "path as a new delivery. Events under a live lease are refused. Name events explicitly "
        "or select a set with filters; a filtered set asks for confirmation unless --yes.",
    )
    p.add_argument(
        "targets", nargs="*", metavar="PROVIDER EVENT_ID", help="a provider and its event ids"
    )
    inspect_events.add_event_filters(p)
    p.add_argument(
        "--max",
        type=positive_int,
        default=None,
        help="at most this many events from a filtered set (default and most: 1000 on a "
        "database, 500 through an operator function)",
    )
    p.add_argument(
        "--queue-url",
        help="processing queue (default: $PROCESSING_QUEUE_URL; else the sweeper); not with "
        "--stack, whose function sends to the stack's queue",
    )
    _add_action_options(p, what="replayed")
    p.set_defaults(func=actions.cmd_replay)

    box = sub.add_parser("outbox", help="list outbox messages and retry dead ones")
    box_sub = box.add_subparsers(dest="outbox_command", required=True, metavar="COMMAND")
    p = box_sub.add_parser(
        "list",
        parents=[reads],
        help="list outbox messages, newest first",
        description="List outbox messages newest first, filtered by status, topic and time, "
        "with their deduplication keys and last errors.",
    )
    inspect_events.add_outbox_filters(p)
    inspect_events.add_paging(p)
    p.set_defaults(func=inspect_events.cmd_outbox_list)
    p = box_sub.add_parser(
        "retry",
        parents=[writes],
        help="move dead outbox messages back to pending (audited)",
        description="Move dead outbox messages back to pending with a fresh attempt budget, "
        "so the sweeper publishes them again; each is recorded in operator_actions.",
    )
    p.add_argument("ids", nargs="*", type=positive_int, metavar="ID", help="outbox message ids")
    p.add_argument(
        "--all-dead",
        action="store_true",
        help="every dead message (up to 1000; 500 through an operator function)",
    )
    p.add_argument("--topic", help="with --all-dead: only this topic")
    _add_action_options(p, what="retried")
    p.set_defaults(func=actions.cmd_outbox_retry)
    pausing.add_commands(sub, reads=writes)
    _add_local_commands(sub)
    return parser


def _add_local_commands(sub: Any) -> None:
    """Commands that need no database of the user's: providers (the registry), preflight, sign,
    send, trigger, dev, check-handlers (its own throwaway one), invoke."""
    providers_command.add_commands(sub)
    console_command.add_command(sub, [_common(json_output=False, stack=True)])
    p = sub.add_parser(
        "preflight",
        help="check the AWS account before `sam deploy` (read-only; a fix for each finding)",
        description="Read the account with describe/get calls only and print a checklist: "
        "subnets, the custom resource's route to S3, VPC endpoints that would collide, the "
        "database secret, provider secrets, the stack name and Lambda concurrency. Exit 0 when "
        "the deploy can succeed, 1 when something must be fixed first.",
    )
    preflight.add_arguments(p)
    p.set_defaults(func=preflight.cmd_preflight)
    policy_command.add_command(sub)

    p = sub.add_parser(
        "sign",
        help="build a correctly signed delivery (headers, curl, API Gateway event)",
        description="Sign BODY_FILE as PROVIDER would, with the provider's first secret.",
    )
    signing.add_signing_options(p)
    p.add_argument(
        "--format",
        choices=signing.FORMATS,
        default="headers",
        help="output shape (default headers)",
    )
    p.add_argument(
        "--url",
        default=None,
        help="base or full URL the delivery is for: curl's target, the API Gateway event's host "
        "and path, the URL that Twilio, Square and HubSpot sign "
        f"(default: $WEBHOOK_INBOX_URL, else the URL of the webhook-inbox dev running from this "
        f"folder, else {signing.DEFAULT_BASE_URL})",
    )
    p.set_defaults(func=signing.cmd_sign)

    p = sub.add_parser(
        "send",
        help="sign and POST a delivery (a smoke test after sam deploy)",
        description="Exit 0 on a 2xx answer, 1 otherwise.",
    )
    p.add_argument("url", metavar="URL", help="API base URL, or the full /webhooks/NAME URL")
    signing.add_signing_options(p)
    p.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=signing.cmd_send)

    p = sub.add_parser(
        "trigger",
        help="send a freshly signed sample event of a chosen type (to dev, or --url)",
        description="Build a realistic delivery of EVENT_TYPE for PROVIDER from the sample "
        "files, sign it as the provider would and POST it to the webhook-inbox dev running "
        "from this folder (or --url); show the answer, or a summary with --count. Exit 0 when "
        "every answer is 2xx, 1 otherwise, 2 for a usage error or an unreachable URL.",
    )
    trigger.add_arguments(p)
    p.set_defaults(func=trigger.cmd_trigger)

    p = sub.add_parser(
        "dev",
        help="run the whole pipeline locally (PostgreSQL, SQS, the three functions)",
        description="Serve POST (and GET) /webhooks/{provider} on localhost through the real "
        "ingest handler, with a moto SQS queue polled like the Lambda event source mapping, the "
        "sweeper on a timer, and outbox messages published to a moto EventBridge bus. "
        "Ctrl-C stops everything.",
    )
    dev_command.add_arguments(p)
    p.set_defaults(func=dev_command.cmd_dev)

    p = sub.add_parser(
        "psql",
        help="psql on the running dev's database (or --url), to look at your handlers' tables",
        description=psql_command.DESCRIPTION,
    )
    psql_command.add_arguments(p)
    p.set_defaults(func=psql_command.cmd_psql)

    p = sub.add_parser(
        "check-handlers",
        help="prove each handler idempotent and order-safe on a throwaway database",
        description="Run every registered handler (with its sample event, or --payload) through "
        "the real processor on a throwaway PostgreSQL with the runtime's and the application's "
        "migrations, under adversarial schedules: a duplicate under a new id, a replay, an older "
        "version after a newer one, a failure after the handler's writes, and two processors at "
        "once. PASS or FAIL per property, with the rows that differ. Exit 0 when nothing "
        "failed, 1 otherwise, 2 for a usage error.",
    )
    check_handlers.add_arguments(p)
    p.set_defaults(func=check_handlers.cmd_check_handlers)

    p = sub.add_parser(
        "invoke",
        help="run one function from sam build's output, like sam local invoke without Docker",
        description=invoke_command.DESCRIPTION,
        epilog=invoke_command.EPILOG,
    )
    invoke_command.add_arguments(p)
    p.set_defaults(func=invoke_command.cmd_invoke)


def _exit_code(exc: WebhookInboxError) -> tuple[int, str]:
    """The one mapping from our errors to exit codes and the line the operator reads."""
    hint = AWS_SETUP_HINTS.get(type(exc.__cause__).__name__)
    if hint:
        return EXIT_USAGE, f"error: {exc} ({hint})"
    # A request the operator code refuses as malformed is a usage error; the rest (a level that
    # does not allow it, something not found, an answer too large) are refusals.
    malformed = isinstance(exc, OperatorRequestRefused) and exc.status == 400
    if isinstance(exc, ConfigurationError) or malformed:
        return EXIT_USAGE, f"error: {exc}"
    if isinstance(exc, RemoteCallFailed | DatabaseUnreachable):
        code = exc.exit_code if isinstance(exc, RemoteCallFailed) else EXIT_UNREACHABLE
        return code, f"error: {exc}"
    if isinstance(exc, StoreUnavailable):
        return EXIT_UNREACHABLE, (
            f"error: the database stopped answering ({exc}); rows reported above as done are "
            "done, the rest are unchanged — check the database and run the command again"
        )
    if isinstance(exc, StoreError):
        return EXIT_FAILED, f"error: database error: {exc}"
    return EXIT_FAILED, f"error: {exc}"


def main(argv: Sequence[str] | None = None) -> int:
    # argparse itself exits with 2 and a usage line for unknown commands and bad options.
    args = build_parser().parse_args(argv)
    # Each command reads the environment afresh: a caller running two commands in one process
    # (tests, scripts) may point the second at another database or queue.
    config.reset()
    try:
        code: int = args.func(args)
        # Output is block-buffered in a pipe: flush here, where a closed reader can be handled,
        # rather than at interpreter exit, where it prints "Exception ignored ... BrokenPipeError".
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`events list --json | head`): stop quietly, as cat and grep do.
        # Whatever is still buffered goes to /dev/null so the exit does not try to write it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_BROKEN_PIPE
    except WebhookInboxError as exc:
        code, message = _exit_code(exc)
        print(message, file=sys.stderr)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        code = 130
    return code


if __name__ == "__main__":
    sys.exit(main())
