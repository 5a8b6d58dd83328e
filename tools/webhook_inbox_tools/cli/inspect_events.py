"""Read-only operator commands: status, events list, events show, outbox list (and ``events
rejected``, dev's own).

Each gathers its answer from a backend (:mod:`.operator_backend`: this machine's database, a
stack's operator function with ``--stack``, or dev's) and renders it with the one formatter
below, whichever answered; ``--json`` prints the answer's result as it came.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.operations.listings import OUTBOX_STATUSES
from webhook_inbox.store import inbox
from webhook_inbox_tools.cli import render
from webhook_inbox_tools.cli.database import open_connection
from webhook_inbox_tools.cli.operator_backend import Backend, UsageError, backend_for
from webhook_inbox_tools.cli.params import page_limit, positive_int, provider_name, when

EVENT_COLUMNS = (
    "id", "provider", "event_id", "delivery", "type", "status", "attempts", "received", "error",
)  # fmt: skip


def add_event_filters(parser: argparse.ArgumentParser, *, provider_flag: bool = True) -> None:
    parser.add_argument(
        "--status",
        action="append",
        choices=inbox.STATUSES,
        default=[],
        help="only events in this status (repeatable)",
    )
    if provider_flag:
        parser.add_argument("--provider", type=provider_name, help="only this provider")
    parser.add_argument("--type", dest="event_type", metavar="TYPE", help="only this event type")
    parser.add_argument(
        "--since", type=when, metavar="WHEN", help="received at or after (ISO time or age: 2h, 7d)"
    )
    parser.add_argument("--until", type=when, metavar="WHEN", help="received before")
    parser.add_argument(
        "--id",
        dest="some_id",
        metavar="ID",
        help="only the event with this event id or provider delivery id",
    )


def event_filter(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's event filters as a request's ``filter`` (unset ones left out)."""
    where = {
        "status": list(args.status) or None,
        "provider": args.provider,
        "type": args.event_type,
        "since": args.since.isoformat() if args.since else None,
        "until": args.until.isoformat() if args.until else None,
        "id": args.some_id,
    }
    return {key: value for key, value in where.items() if value is not None}


def add_paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        type=page_limit,
        default=50,
        help="rows per page (default 50; at most 1000, 500 through an operator function)",
    )
    parser.add_argument(
        "--cursor",
        type=positive_int,
        metavar="ID",
        help="continue a listing: the cursor printed with the previous page",
    )


def check_limit(backend: Backend, flag: str, value: int) -> None:
    if value > backend.max_rows:
        raise UsageError(f"{flag} is at most {backend.max_rows} through {backend.label}")


def _paging(args: argparse.Namespace, backend: Backend) -> dict[str, Any]:
    check_limit(backend, "--limit", args.limit)
    return {"limit": args.limit, **({"cursor": args.cursor} if args.cursor else {})}


def print_messages(messages: list[str]) -> None:
    for message in messages:
        print(message, file=sys.stderr)


def event_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    return [
        [
            r["id"],
            r["provider"],
            r["event_id"],
            r["delivery_id"],
            r["event_type"],
            r["status"],
            r["attempts"],
            render.age(r["received_at"]) + " ago",
            render.truncate(r["last_error"], 48),
        ]
        for r in render.revive_times(rows)
    ]


def _next_page_hint(cursor: int | None) -> None:
    if cursor is not None:
        print(f"more rows: repeat with --cursor {cursor} for the next page", file=sys.stderr)


# --- status --------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    with closing(backend_for(args)) as backend:
        answer = backend.call({"command": "status"})
    print_messages(answer.messages)
    if args.json:
        render.print_json(answer.result)
        return 0
    render_status(render.revive_times(answer.result))
    return 0


def render_status(state: dict[str, Any]) -> None:
    render.table(
        ("status", "events", "oldest"),
        [
            [status, s["count"], render.age(s["oldest_received_at"])]
            for status, s in state["events"].items()
        ],
        colour_column="status",
    )
    box = state["outbox"]
    print()
    print(f"oldest unfinished event:  {render.age(state['oldest_unfinished_received_at'])}")
    print(
        f"leases:                   {state['live_leases']} live, {state['expired_leases']} expired"
    )
    print(
        f"outbox:                   {box['pending']} pending "
        f"(oldest {render.age(box['oldest_pending_created_at'])}), {box['dead']} dead"
    )
    pauses = state.get("pauses") or []
    held = sum(p["held"] for p in pauses)
    print(f"paused:                   {len(pauses)} (holding {held} event(s))")
    for pause in pauses:
        who = f"by {pause['paused_by']}"
        if pause["circuit"]:
            who = "circuit open" if pause["holds_new"] else "failing: retries held"
        print(f"  {pause['provider']} {pause['event_type']}: {who}, {pause['held']} held")


# --- events --------------------------------------------------------------------------------


def cmd_events_list(args: argparse.Namespace) -> int:
    with closing(backend_for(args)) as backend:
        body = {"command": "events list", "filter": event_filter(args), **_paging(args, backend)}
        answer = backend.call(body)
    print_messages(answer.messages)
    if args.json:
        render.print_json(answer.result)
        return 0
    if not answer.result["events"]:
        print("no events match", file=sys.stderr)
        return 0
    render.table(EVENT_COLUMNS, event_rows(answer.result["events"]), colour_column="status")
    _next_page_hint(answer.result["next_cursor"])
    return 0


_SHOWN_FIELDS = (
    "id",
    "provider",
    "event_id",
    "delivery_id",
    "event_type",
    "status",
    "attempts",
    "delivery_count",
    "received_at",
    "last_delivery_at",
    "updated_at",
    "available_at",
    "enqueued_at",
    "processed_at",
    "lease_owner",
    "lease_expires_at",
    "error_kind",
    "last_error",
    "disposition",
    "payload_purged_at",
)


def cmd_events_show(args: argparse.Namespace) -> int:
    body = {"command": "events show", "provider": args.provider, "id": args.event_id}
    if args.payload:
        body["payload"] = True
    with closing(backend_for(args)) as backend:
        answer = backend.call(body)
    print_messages(answer.messages)
    if args.json:
        render.print_json(answer.result)
        return 0
    render_event(answer.result, payload=args.payload)
    return 0


def render_event(document: dict[str, Any], *, payload: bool) -> None:
    event = render.revive_times({k: v for k, v in document.items() if k != "payload"})
    enabled = render.colour_enabled(sys.stdout)
    width = max(len(f) for f in _SHOWN_FIELDS)
    for name in _SHOWN_FIELDS:
        value = render.cell_text(event.get(name))
        if name == "status":
            value = render.paint(value, render.STATUS_COLOURS.get(value), enabled=enabled)
        print(f"{name.ljust(width)}  {value}")
    history = event.get("attempt_history") or []
    if history:
        print("\nattempts that did not process it:")
        render.table(
            ("attempt", "started", "ended", "seconds", "outcome", "error kind"),
            [
                [
                    a["attempt"],
                    a["started_at"],
                    a["ended_at"],
                    a["seconds"],
                    a["outcome"],
                    a["error_kind"] or "",
                ]
                for a in history
            ],
        )
    actions = event["operator_actions"]
    if actions:
        print("\noperator actions:")
        render.table(
            ("at", "action", "operator", "from", "attempts", "reason"),
            [
                [
                    a["created_at"],
                    a["action"],
                    a["operator"],
                    a["previous_status"],
                    a["previous_attempts"],
                    render.truncate(a["reason"], 60),
                ]
                for a in actions
            ],
        )
    if payload:
        print("\npayload:")
        stored = document.get("payload")
        print(render.to_json(stored) if stored is not None else "(purged)")


# --- outbox list ---------------------------------------------------------------------------


def outbox_table(rows: list[dict[str, Any]], *, dedup_key: bool) -> None:
    """Outbox messages as a table; ``dedup_key`` adds that column (and leaves the error less)."""
    columns = ["id", "topic", "status", "attempts", "source", "created"]
    if dedup_key:
        columns.append("dedup key")

    def cells(r: dict[str, Any]) -> list[Any]:
        row = [
            r["id"],
            r["topic"],
            r["status"],
            r["attempts"],
            r["source_event_id"],
            render.age(r["created_at"]) + " ago",
        ]
        if dedup_key:
            row.append(render.truncate(r["deduplication_key"], 32))
        return [*row, render.truncate(r["last_error"], 40 if dedup_key else 48)]

    rows = render.revive_times(rows)
    render.table((*columns, "error"), [cells(r) for r in rows], colour_column="status")


def add_outbox_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--status",
        action="append",
        default=[],
        choices=OUTBOX_STATUSES,
        help="only messages in this status (repeatable)",
    )
    parser.add_argument("--topic", help="only this topic")
    parser.add_argument("--since", type=when, metavar="WHEN", help="created at or after")
    parser.add_argument("--until", type=when, metavar="WHEN", help="created before")
    parser.add_argument(
        "--event",
        dest="source_event",
        type=positive_int,
        metavar="ROW_ID",
        help="only the messages this event emitted (its row id, events list's first column)",
    )


def cmd_outbox_list(args: argparse.Namespace) -> int:
    where = {
        "status": list(args.status) or None,
        "topic": args.topic,
        "since": args.since.isoformat() if args.since else None,
        "until": args.until.isoformat() if args.until else None,
        "event": args.source_event,
    }
    with closing(backend_for(args)) as backend:
        body = {
            "command": "outbox list",
            "filter": {key: value for key, value in where.items() if value is not None},
            **_paging(args, backend),
        }
        answer = backend.call(body)
    print_messages(answer.messages)
    if args.json:
        render.print_json(answer.result)
        return 0
    if not answer.result["messages"]:
        print("no outbox messages match", file=sys.stderr)
        return 0
    outbox_table(answer.result["messages"], dedup_key=True)
    _next_page_hint(answer.result["next_cursor"])
    return 0


# --- events rejected (dev only: its own table, on its database) ----------------------------


def cmd_events_rejected(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from webhook_inbox_tools.dev import refusals

    since = args.since or datetime.now(UTC) - timedelta(hours=24)
    with open_connection(args) as conn:
        rows = refusals.refused(conn, since=since, provider=args.provider, limit=args.limit)
    if rows is None:
        raise ConfigurationError(
            "this database is not a webhook-inbox dev's: a deployed stack counts refusals in its "
            "Rejected metric and ingest's log lines (infra/RUNBOOK.md, deliveries-refused)"
        )
    if args.json:
        render.print_json({"rejected": rows})
        return 0
    if not rows:
        print("no refused deliveries", file=sys.stderr)
        return 0
    columns = ("refused_at", "provider", "status", "reason", "delivery_id", "detail")
    render.table(columns, [[r[c] for c in columns] for r in rows])
    return 0
