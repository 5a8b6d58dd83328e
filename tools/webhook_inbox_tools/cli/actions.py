"""Operator commands that change state: replay and outbox retry. Both are audited.

A set selected by filters is shown and confirmed here, never by the function: the CLI asks for
it with a dry run, shows it, asks, and then sends the command again with ``confirmed`` and the
rows it showed (``only_rows`` / ``only_ids``), so exactly what the operator saw is acted on.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from typing import Any

from webhook_inbox.operations import commands
from webhook_inbox_tools.cli import render
from webhook_inbox_tools.cli.inspect_events import (
    EVENT_COLUMNS,
    check_limit,
    event_filter,
    event_rows,
    outbox_table,
    print_messages,
)
from webhook_inbox_tools.cli.operator_backend import Backend, UsageError, backend_for

_PAST = {"replay": "replayed", "retry": "retried"}


def confirm(question: str) -> bool:
    """Ask on stderr and read stdin; end of input counts as no."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        print(file=sys.stderr)  # a piped answer is not echoed; end the prompt's line ourselves
    return answer.strip().lower() in {"y", "yes"}


def _outcome_table(outcomes: list[dict[str, Any]], *, kind: str) -> None:
    if kind == "replay":
        render.table(
            ("target", "was", "outcome", "enqueued", "detail"),
            [
                [o["label"], o["previous_status"], o["outcome"], o["enqueued"], o["detail"]]
                for o in outcomes
            ],
            colour_column="outcome",
        )
    else:
        render.table(
            ("target", "was", "outcome", "detail"),
            [[o["label"], o["previous_status"], o["outcome"], o["detail"]] for o in outcomes],
            colour_column="outcome",
        )


def _report(args: argparse.Namespace, answer: commands.Answer, *, kind: str) -> int:
    print_messages(answer.messages)
    result = answer.result
    failed = [o for o in result["outcomes"] if o["outcome"] in {"refused", "not_found"}]
    if args.json:
        render.print_json(result)
    else:
        print()
        _outcome_table(result["outcomes"], kind=kind)
        done = len(result["outcomes"]) - len(failed)
        verb = f"would {kind}" if args.dry_run else _PAST[kind]
        print(f"\n{done} {verb}, {len(failed)} refused or not found")
    for note in result["notes"]:
        print(f"note: {note}", file=sys.stderr)
    return 1 if failed else 0


def _who(backend: Backend) -> str:
    return backend.operator or "the caller AWS authenticates"


def _action_fields(args: argparse.Namespace) -> dict[str, Any]:
    return {"reason": args.reason, "dry_run": args.dry_run}


# --- replay --------------------------------------------------------------------------------


def _validate_replay_args(args: argparse.Namespace) -> None:
    filtered = bool(event_filter(args))
    if args.targets and filtered:
        raise UsageError("give either PROVIDER EVENT_ID... or filters (--status, --provider, …)")
    if args.targets and len(args.targets) < 2:
        raise UsageError("name at least one event: replay PROVIDER EVENT_ID [EVENT_ID ...]")
    if not args.targets and not filtered:
        raise UsageError(
            "name events (replay PROVIDER EVENT_ID...) or select them with filters "
            "(e.g. --status dead_letter --provider stripe)"
        )


def _show_selection(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    if args.json:
        return
    if rows:
        print(f"{len(rows)} event(s) selected, current state:")
        render.table(EVENT_COLUMNS, event_rows(rows), colour_column="status")
    else:
        print("no events match", file=sys.stderr)


def cmd_replay(args: argparse.Namespace) -> int:
    _validate_replay_args(args)
    with closing(backend_for(args)) as backend:
        body: dict[str, Any] = {"command": "replay", **_action_fields(args)}
        if args.targets:
            provider, *some_ids = args.targets
            check_limit(backend, "the number of EVENT_IDs", len(dict.fromkeys(some_ids)))
            body.update(provider=provider, ids=list(dict.fromkeys(some_ids)))
        else:
            most = args.max or backend.max_rows
            check_limit(backend, "--max", most)
            body.update(filter=event_filter(args), max=most)
        if not args.targets and not args.dry_run:
            if not args.yes:
                preview = backend.call({**body, "dry_run": True})
                rows = preview.result["before"]
                _show_selection(args, rows)
                if not rows:
                    return 0
                question = f"Replay these {len(rows)} event(s) as {_who(backend)}?"
                if not confirm(question):
                    print("aborted; nothing was changed", file=sys.stderr)
                    return 1
                body["only_rows"] = [r["id"] for r in rows]
            body["confirmed"] = True
            shown = not args.yes
        else:
            shown = False
        progress = render.Progress("replaying")
        answer = backend.call(body, progress=progress.update)
        progress.close()
    rows = answer.result["before"]
    if not shown:
        _show_selection(args, rows)
    if not rows and not answer.result["outcomes"]:
        return 0
    return _report(args, answer, kind="replay")


# --- outbox retry --------------------------------------------------------------------------


def cmd_outbox_retry(args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.all_dead):
        raise UsageError("give outbox message ids, or --all-dead (optionally with --topic)")
    if args.topic and not args.all_dead:
        raise UsageError("--topic selects messages only together with --all-dead")
    with closing(backend_for(args)) as backend:
        body: dict[str, Any] = {"command": "outbox retry", **_action_fields(args)}
        if args.all_dead:
            body["all_dead"] = True
            if args.topic:
                body["topic"] = args.topic
        else:
            ids = list(dict.fromkeys(args.ids))
            check_limit(backend, "the number of IDs", len(ids))
            body["ids"] = ids
        shown = False
        if args.all_dead and not args.dry_run:
            if not args.yes:
                rows = backend.call({**body, "dry_run": True}).result["before"]
                if not _show_dead(args, rows):
                    return 0
                shown = True
                question = f"Retry these {len(rows)} outbox message(s) as {_who(backend)}?"
                if not confirm(question):
                    print("aborted; nothing was changed", file=sys.stderr)
                    return 1
                body["only_ids"] = [r["id"] for r in rows]
            body["confirmed"] = True
        answer = backend.call(body)
    if args.all_dead and not shown and not _show_dead(args, answer.result["before"]):
        return 0
    return _report(args, answer, kind="retry")


def _show_dead(args: argparse.Namespace, rows: list[dict[str, Any]]) -> bool:
    """Show the dead messages selected; False when there are none (nothing to do)."""
    if args.json:
        return True
    if not rows:
        print("no dead outbox messages match", file=sys.stderr)
        return False
    print(f"{len(rows)} dead message(s) selected, current state:")
    outbox_table(rows, dedup_key=False)
    return True
