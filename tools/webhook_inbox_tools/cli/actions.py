"""Operator commands that change state: replay and outbox retry. Both are audited."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from psycopg import Connection

from webhook_inbox import aws, config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.settings import QueueSettings
from webhook_inbox_tools import operator_actions
from webhook_inbox_tools.cli import render
from webhook_inbox_tools.cli.database import open_connection
from webhook_inbox_tools.cli.inspect_events import (
    EVENT_COLUMNS,
    event_filter,
    event_rows,
    outbox_table,
)
from webhook_inbox_tools.cli.params import operator_name

_PAST = {"replay": "replayed", "retry": "retried"}
_SQS_HOST = re.compile(r"^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class UsageError(ConfigurationError):
    """The command line asks for something contradictory (exit code 2)."""


def sqs_client_for(queue_url: str) -> Any:
    """An SQS client for the queue's region; a non-AWS URL (moto, LocalStack) is the endpoint."""
    host = urlsplit(queue_url).hostname or ""
    match = _SQS_HOST.match(host)
    if match:
        return aws.client("sqs", region_name=match[1])
    parts = urlsplit(queue_url)
    return aws.client(
        "sqs",
        endpoint_url=f"{parts.scheme}://{parts.netloc}",
        region_name=config.env("AWS_REGION") or config.env("AWS_DEFAULT_REGION") or "us-east-1",
    )


def confirm(question: str) -> bool:
    """Ask on stderr and read stdin; end of input counts as no."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        print(file=sys.stderr)  # a piped answer is not echoed; end the prompt's line ourselves
    return answer.strip().lower() in {"y", "yes"}


def _outcome_table(outcomes: Sequence[operator_actions.ActionOutcome], *, kind: str) -> None:
    if kind == "replay":
        render.table(
            ("target", "was", "outcome", "enqueued", "detail"),
            [[o.label, o.previous_status, o.outcome, o.enqueued, o.detail] for o in outcomes],
            colour_column="outcome",
        )
    else:
        render.table(
            ("target", "was", "outcome", "detail"),
            [[o.label, o.previous_status, o.outcome, o.detail] for o in outcomes],
            colour_column="outcome",
        )


def _report(
    args: argparse.Namespace,
    before: list[dict[str, Any]],
    outcomes: list[operator_actions.ActionOutcome],
    *,
    kind: str,
    notes: list[str],
) -> int:
    failed = [o for o in outcomes if not o.ok]
    if args.json:
        render.print_json(
            {
                "dry_run": args.dry_run,
                "before": before,
                "outcomes": [o.as_dict() for o in outcomes],
                "notes": notes,
            }
        )
    else:
        print()
        _outcome_table(outcomes, kind=kind)
        done = len(outcomes) - len(failed)
        verb = f"would {kind}" if args.dry_run else _PAST[kind]
        print(f"\n{done} {verb}, {len(failed)} refused or not found")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 1 if failed else 0


# --- replay --------------------------------------------------------------------------------


def _replay_targets(
    conn: Connection[Any], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[operator_actions.ActionOutcome], list[str]]:
    """The rows to replay, outcomes for ids that do not exist, and notes for the operator."""
    notes: list[str] = []
    if args.targets:
        provider, *some_ids = args.targets
        keys, missing = [], []
        for some_id in dict.fromkeys(some_ids):
            found = operator_actions.resolve_event_id(conn, provider, some_id)
            if found.event_id is None:
                choices = [f"\n  webhook-inbox replay {provider} {e}" for e in found.candidates]
                missing.append(
                    operator_actions.ActionOutcome(
                        None,
                        f"{provider}/{some_id}",
                        None,
                        "not_found",
                        found.problem + "".join(choices),
                    )
                )
                continue
            if found.by_delivery_id:
                notes.append(f"delivery id {some_id} is event {found.event_id}")
            keys.append(found.event_id)
        return operator_actions.find_events(conn, provider, keys), missing, notes
    rows: list[dict[str, Any]] = []
    cursor = None
    where = event_filter(args)
    while len(rows) < args.max:
        page = operator_actions.list_events(
            conn, where, limit=min(operator_actions.MAX_PAGE, args.max - len(rows)), cursor=cursor
        )
        rows.extend(page.rows)
        cursor = page.next_cursor
        if cursor is None:
            break
    if cursor is not None:
        notes.append(
            f"more events match than --max {args.max}: only the newest {args.max} were selected"
        )
    rows.sort(key=lambda r: r["id"])  # replay in arrival order
    return rows, [], notes


def _validate_replay_args(args: argparse.Namespace) -> None:
    filtered = not event_filter(args).is_empty()
    if args.targets and filtered:
        raise UsageError("give either PROVIDER EVENT_ID... or filters (--status, --provider, …)")
    if args.targets and len(args.targets) < 2:
        raise UsageError("name at least one event: replay PROVIDER EVENT_ID [EVENT_ID ...]")
    if not args.targets and not filtered:
        raise UsageError(
            "name events (replay PROVIDER EVENT_ID...) or select them with filters "
            "(e.g. --status dead_letter --provider stripe)"
        )


def cmd_replay(args: argparse.Namespace) -> int:
    _validate_replay_args(args)
    who = operator_name(args.operator)
    queue_url = args.queue_url or config.current(QueueSettings).queue_url or None
    with open_connection(args) as conn:
        rows, missing, notes = _replay_targets(conn, args)
        if not args.json:
            if rows:
                print(f"{len(rows)} event(s) selected, current state:")
                render.table(EVENT_COLUMNS, event_rows(rows), colour_column="status")
            else:
                print("no events match", file=sys.stderr)
        if not rows:
            return _report(args, [], missing, kind="replay", notes=notes) if missing else 0
        needs_consent = not args.targets and not args.dry_run and not args.yes
        if needs_consent and not confirm(f"Replay these {len(rows)} event(s) as {who}?"):
            print("aborted; nothing was changed", file=sys.stderr)
            return 1
        send = None
        if queue_url and not args.dry_run:
            send = operator_actions.sqs_sender(
                queue_url,
                sqs_client_for(queue_url),
                on_error=lambda e: print(f"warning: send failed: {e}", file=sys.stderr),
            )
        elif not args.dry_run:
            notes.append(
                "no queue URL (--queue-url or PROCESSING_QUEUE_URL): the sweeper will enqueue "
                "the replayed events on its next run"
            )
        progress = render.Progress(len(rows), "replaying")
        outcomes = missing + operator_actions.replay_events(
            conn,
            [r["id"] for r in rows],
            operator=who,
            reason=args.reason,
            dry_run=args.dry_run,
            send=send,
            on_progress=lambda _: progress.advance(),
        )
        progress.close()
    unsent = [o for o in outcomes if o.outcome == "replayed" and not o.enqueued]
    if send and unsent:
        notes.append(
            f"{len(unsent)} replayed event(s) were not sent to the queue; they are safely "
            "'received' and the sweeper will enqueue them on its next run"
        )
    if args.dry_run:
        notes.append(
            "dry run: nothing was written or sent"
            + (f"; would send to {queue_url}" if queue_url else "")
        )
    return _report(args, rows, outcomes, kind="replay", notes=notes)


# --- outbox retry --------------------------------------------------------------------------


def cmd_outbox_retry(args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.all_dead):
        raise UsageError("give outbox message ids, or --all-dead (optionally with --topic)")
    if args.topic and not args.all_dead:
        raise UsageError("--topic selects messages only together with --all-dead")
    who = operator_name(args.operator)
    with open_connection(args) as conn:
        if args.all_dead:
            where = operator_actions.OutboxFilter(statuses=("dead",), topic=args.topic)
            rows = operator_actions.list_outbox(conn, where, limit=operator_actions.MAX_PAGE).rows
            ids = sorted(r["id"] for r in rows)
        else:
            ids = list(dict.fromkeys(args.ids))
            rows = []
        if args.all_dead and not args.json:
            if not rows:
                print("no dead outbox messages match", file=sys.stderr)
                return 0
            print(f"{len(rows)} dead message(s) selected, current state:")
            outbox_table(rows, dedup_key=False)
        needs_consent = args.all_dead and not args.dry_run and not args.yes
        if needs_consent and not confirm(f"Retry these {len(ids)} outbox message(s) as {who}?"):
            print("aborted; nothing was changed", file=sys.stderr)
            return 1
        outcomes = [
            operator_actions.retry_outbox_message(
                conn, mid, operator=who, reason=args.reason, dry_run=args.dry_run
            )
            for mid in ids
        ]
    notes = ["dry run: nothing was written"] if args.dry_run else []
    return _report(args, rows, outcomes, kind="retry", notes=notes)
