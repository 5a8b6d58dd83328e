"""Read-only operator commands: status, events list, events show, outbox list."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from psycopg import Connection

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.store import inbox
from webhook_inbox_tools import operator_actions
from webhook_inbox_tools.cli import render
from webhook_inbox_tools.cli.database import open_connection
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


def event_filter(args: argparse.Namespace) -> operator_actions.EventFilter:
    return operator_actions.EventFilter(
        statuses=tuple(args.status),
        provider=args.provider,
        event_type=args.event_type,
        since=args.since,
        until=args.until,
    )


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
        for r in rows
    ]


def _next_page_hint(cursor: int | None) -> None:
    if cursor is not None:
        print(f"more rows: repeat with --cursor {cursor} for the next page", file=sys.stderr)


# --- status --------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    with open_connection(args) as conn:
        state = operator_actions.system_status(conn)
    if args.json:
        render.print_json(
            {
                "events": {
                    s.status: {"count": s.count, "oldest_received_at": s.oldest_received_at}
                    for s in state.events.values()
                },
                "oldest_unfinished_received_at": state.oldest_unfinished_received_at,
                "live_leases": state.live_leases,
                "expired_leases": state.expired_leases,
                "outbox": {
                    "pending": state.outbox.pending,
                    "dead": state.outbox.dead,
                    "oldest_pending_created_at": state.outbox.oldest_pending_created_at,
                },
            }
        )
        return 0
    render.table(
        ("status", "events", "oldest"),
        [[s.status, s.count, render.age(s.oldest_received_at)] for s in state.events.values()],
        colour_column="status",
    )
    print()
    print(f"oldest unfinished event:  {render.age(state.oldest_unfinished_received_at)}")
    print(f"leases:                   {state.live_leases} live, {state.expired_leases} expired")
    print(
        f"outbox:                   {state.outbox.pending} pending "
        f"(oldest {render.age(state.outbox.oldest_pending_created_at)}), "
        f"{state.outbox.dead} dead"
    )
    return 0


# --- events --------------------------------------------------------------------------------


def cmd_events_list(args: argparse.Namespace) -> int:
    with open_connection(args) as conn:
        page = operator_actions.list_events(
            conn, event_filter(args), limit=args.limit, cursor=args.cursor
        )
    if args.json:
        render.print_json({"events": page.rows, "next_cursor": page.next_cursor})
        return 0
    if not page.rows:
        print("no events match", file=sys.stderr)
        return 0
    render.table(EVENT_COLUMNS, event_rows(page.rows), colour_column="status")
    _next_page_hint(page.next_cursor)
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


def _find_event(conn: Connection[Any], provider: str, some_id: str) -> dict[str, Any] | None:
    """The event whose key is ``some_id``, else the one whose provider delivery id it is
    (operator_actions.resolve_event_id: the same lookup `replay` makes)."""
    found = operator_actions.resolve_event_id(conn, provider, some_id)
    if found.event_id is None:
        print(f"error: {found.problem}", file=sys.stderr)
        for event_id in found.candidates:
            print(f"  webhook-inbox events show {provider} {event_id}", file=sys.stderr)
        return None
    if found.by_delivery_id:
        print(f"found by delivery id {some_id!r}", file=sys.stderr)
    return inbox.get_event(conn, provider, found.event_id)


def cmd_events_show(args: argparse.Namespace) -> int:
    with open_connection(args) as conn:
        event = _find_event(conn, args.provider, args.event_id)
        if event is None:
            return 1
        actions = operator_actions.event_actions(conn, event["id"])
        payload = operator_actions.event_payload(conn, event["id"]) if args.payload else None
    if args.json:
        document = {**event, "operator_actions": actions}
        if args.payload:
            document["payload"] = payload
        render.print_json(document)
        return 0
    enabled = render.colour_enabled(sys.stdout)
    width = max(len(f) for f in _SHOWN_FIELDS)
    for name in _SHOWN_FIELDS:
        value = render.cell_text(event.get(name))
        if name == "status":
            value = render.paint(value, render.STATUS_COLOURS.get(value), enabled=enabled)
        print(f"{name.ljust(width)}  {value}")
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
    if args.payload:
        print("\npayload:")
        print(render.to_json(payload) if payload is not None else "(purged)")
    return 0


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

    render.table((*columns, "error"), [cells(r) for r in rows], colour_column="status")


def cmd_outbox_list(args: argparse.Namespace) -> int:
    where = operator_actions.OutboxFilter(
        statuses=tuple(args.status), topic=args.topic, since=args.since, until=args.until
    )
    with open_connection(args) as conn:
        page = operator_actions.list_outbox(conn, where, limit=args.limit, cursor=args.cursor)
    if args.json:
        render.print_json({"messages": page.rows, "next_cursor": page.next_cursor})
        return 0
    if not page.rows:
        print("no outbox messages match", file=sys.stderr)
        return 0
    outbox_table(page.rows, dedup_key=True)
    _next_page_hint(page.next_cursor)
    return 0


def add_paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit", type=page_limit, default=50, help="rows per page (default 50, at most 1000)"
    )
    parser.add_argument(
        "--cursor",
        type=positive_int,
        metavar="ID",
        help="continue a listing: the cursor printed with the previous page",
    )


def cmd_events_rejected(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from webhook_inbox_tools.dev import refusals

    since = args.since or datetime.now(UTC) - timedelta(hours=24)
    with open_connection(args) as conn:
        rows = refusals.refused(conn, since=since, provider=args.provider, limit=args.limit)
    if rows is None:
        raise ConfigurationError(
            "this database is not a webhook-inbox dev's: a deployed stack counts refusals in its "
            "Rejected metric and ingest's log lines (infra/RUNBOOK.md, signature-rejections)"
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
