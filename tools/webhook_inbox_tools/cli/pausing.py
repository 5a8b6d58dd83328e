"""``webhook-inbox pause``, ``resume`` and ``paused``: hold a provider's or a handler key's events
while its owner fixes something, and let them go again in arrival order.

Ingest keeps accepting and storing (providers see 2xx as always); the processor holds what a
pause matches (no attempt, no lease); the sweeper neither re-sends nor dead-letters it. The same
list shows the circuits the processor opened itself (``paused by circuit breaker``): ``resume``
ends one too. Through ``--stack`` (the act level for pause and resume), a database of yours, or
the dev running here, like every operator command.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from typing import Any

from webhook_inbox_tools.cli import render
from webhook_inbox_tools.cli.inspect_events import print_messages
from webhook_inbox_tools.cli.operator_backend import backend_for
from webhook_inbox_tools.cli.params import reason_text

PAUSE_COLUMNS = ("provider", "type", "since", "by", "held", "reason")


def add_commands(sub: Any, *, reads: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "pause",
        parents=[reads],
        help="hold a provider's or a handler key's events (ingest keeps accepting them)",
        description="Hold every event of PROVIDER, or of one TYPE (an exact type, or a prefix "
        "ending in '*': 'invoice.*'): ingest accepts and stores them as always, the processor "
        "holds them without spending an attempt, and `webhook-inbox resume` lets them go in "
        "arrival order. Recorded with who paused and why; a pause older than the stack's "
        "PauseAlarmHours pages once.",
    )
    _key_arguments(p)
    p.add_argument("--reason", required=True, type=reason_text, help="why (kept with the pause)")
    p.add_argument(
        "--operator",
        help="who pauses (default: $USER); not with --stack, which records your AWS principal",
    )
    p.set_defaults(func=cmd_pause)

    p = sub.add_parser(
        "resume",
        parents=[reads],
        help="end a pause (or an open circuit) and let what it held go, in arrival order",
        description="End the pause of PROVIDER (or of PROVIDER TYPE, exactly as paused) and "
        "put the events it held back, due in arrival order; the sweeper sends them at its "
        "usual rate. Ends a circuit the processor opened, too.",
    )
    _key_arguments(p)
    p.add_argument(
        "--operator",
        help="who resumes (default: $USER); not with --stack, which records your AWS principal",
    )
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser(
        "paused",
        parents=[reads],
        help="the active pauses and open circuits: who, why, since when, how many held",
        description="Every active pause, oldest first: the key, since when, who paused it (or "
        "`circuit breaker`), how many events it holds and why. Reads only.",
    )
    p.set_defaults(func=cmd_paused)


def _key_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", metavar="PROVIDER", help="the provider's name in the inbox")
    parser.add_argument(
        "event_type",
        metavar="TYPE",
        nargs="?",
        default="*",
        help="one event type, or a prefix ending in '*' (default: every type)",
    )


def cmd_pause(args: argparse.Namespace) -> int:
    body = {
        "command": "pause",
        "provider": args.provider,
        "type": args.event_type,
        "reason": args.reason,
    }
    with closing(backend_for(args)) as backend:
        answer = backend.call(body)
    print_messages(answer.messages)
    if args.json:
        render.print_json(answer.result)
        return 0
    print(
        f"paused {args.provider} {args.event_type} (by {answer.operator}): its events are "
        "stored and held until `webhook-inbox resume`"
    )
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    body = {"command": "resume", "provider": args.provider, "type": args.event_type}

    def progress(done: int, _total: int) -> None:
        if done and not args.json:
            print(f"  {done} held event(s) released", file=sys.stderr)

    with closing(backend_for(args)) as backend:
        answer = backend.call(body, progress=progress)
    print_messages(answer.messages)
    if args.json:
        render.print_json(answer.result)
        return 0
    released = answer.result["released"]
    print(
        f"resumed {args.provider} {args.event_type} (by {answer.operator}): {released} held "
        "event(s) due again, oldest first; the sweeper sends them within a minute"
    )
    return 0


def cmd_paused(args: argparse.Namespace) -> int:
    with closing(backend_for(args)) as backend:
        answer = backend.call({"command": "paused"})
    print_messages(answer.messages)
    if args.json:
        render.print_json(answer.result)
        return 0
    pauses = render.revive_times(answer.result)["pauses"]
    if not pauses:
        print("nothing is paused", file=sys.stderr)
        return 0
    render_pauses(pauses)
    return 0


def render_pauses(pauses: list[dict[str, Any]]) -> None:
    render.table(PAUSE_COLUMNS, [_row(p) for p in pauses])


def _row(pause: dict[str, Any]) -> list[Any]:
    reason = pause["reason"]
    if pause["circuit"] and pause["last_error"]:
        reason = f"{reason}; last error: {pause['last_error']}"
    return [
        pause["provider"],
        pause["event_type"],
        render.age(pause["paused_at"]),
        pause["paused_by"],
        pause["held"],
        reason[:120],
    ]
