"""Run one operator request (:mod:`.requests`) against the database and gather its answer.

The one place an operator command's data is gathered, whoever asks: the operator function
(functions/operator, behind its Function URL) and the ``webhook-inbox`` CLI acting on a database
of its own both call :func:`run`, and the CLI renders the :class:`Answer` the same way from
either. ``Answer.result`` is exactly what the CLI's ``--json`` prints; ``messages`` are the lines
it prints on stderr; ``log`` is what the function's log line adds (ids and counts, never a
payload).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from psycopg import Connection

from webhook_inbox.errors import (
    OperatorConflict,
    OperatorForbidden,
    OperatorNotFound,
    OperatorRequestRefused,
)
from webhook_inbox.operations import actions, listings, requests
from webhook_inbox.operations.actions import ActionOutcome
from webhook_inbox.operations.requests import ACT
from webhook_inbox.store import pauses


@dataclass(frozen=True)
class Caller:
    """Who asks (recorded as the operator of every action) and what they may do."""

    operator: str
    level: str  # requests.READ or requests.ACT


@dataclass(frozen=True)
class Queue:
    """Where replayed events' wake-ups go; the client is built on the first send."""

    url: str
    client: Callable[[], Any]


@dataclass
class Answer:
    result: dict[str, Any]
    messages: list[str] = field(default_factory=list)
    log: dict[str, Any] = field(default_factory=dict)
    operator: str | None = None  # who the actions were (or would be) recorded as

    def wire(self) -> dict[str, Any]:
        """The answer as the operator function returns it (and the CLI reads it)."""
        return {"result": self.result, "messages": self.messages, "operator": self.operator}


# A step of an action's progress: (rows done, rows selected).
Progress = Callable[[int, int], None]


def run(
    conn: Connection[Any],
    request: requests.Request,
    caller: Caller,
    *,
    queue: Queue | None = None,
    max_rows: int = listings.MAX_PAGE,
    on_progress: Progress | None = None,
) -> Answer:
    """Gather ``request``'s answer (acting on it, for an act command) as ``caller``."""
    answer = _run(conn, request, caller, queue=queue, max_rows=max_rows, on_progress=on_progress)
    answer.operator = caller.operator
    return answer


def _run(
    conn: Connection[Any],
    request: requests.Request,
    caller: Caller,
    *,
    queue: Queue | None,
    max_rows: int,
    on_progress: Progress | None,
) -> Answer:
    if requests.level_needed(request) == ACT and caller.level != ACT:
        what = "a payload" if isinstance(request, requests.EventsShow) else "this command"
        raise OperatorForbidden(
            f"the read level refuses {what}: it needs the act level (the act function's URL, "
            "which a principal with OperatorActPolicy may call)"
        )
    progress = on_progress or (lambda _done, _total: None)
    if isinstance(request, requests.Status | requests.Traffic):
        return _overview(conn, request)
    if isinstance(request, requests.EventsList | requests.OutboxList):
        return _list(conn, request, max_rows)
    if isinstance(request, requests.EventsShow):
        return _show(conn, request)
    if isinstance(request, requests.Replay):
        return _replay(conn, request, caller, queue=queue, max_rows=max_rows, progress=progress)
    if isinstance(request, requests.OutboxRetry):
        return _outbox_retry(conn, request, caller, max_rows)
    return _pausing(conn, request, caller, progress)


def _overview(conn: Connection[Any], request: requests.Status | requests.Traffic) -> Answer:
    if isinstance(request, requests.Status):
        return Answer(_status(conn))
    found = listings.traffic(conn, request.since, request.until, request.bucket_seconds)
    window = {"since": request.since, "until": request.until}
    return Answer({**window, "bucket_seconds": request.bucket_seconds, **found})


def _pausing(
    conn: Connection[Any],
    request: requests.Paused | requests.Pause | requests.Resume,
    caller: Caller,
    progress: Progress,
) -> Answer:
    if isinstance(request, requests.Paused):
        return Answer({"pauses": _pauses(conn)})
    if isinstance(request, requests.Pause):
        return _pause(conn, request, caller)
    return _resume(conn, request, caller, progress)


def _list(
    conn: Connection[Any], request: requests.EventsList | requests.OutboxList, max_rows: int
) -> Answer:
    if isinstance(request, requests.EventsList):
        page = listings.list_events(
            conn, request.where, limit=request.limit, cursor=request.cursor, max_page=max_rows
        )
        return Answer({"events": page.rows, "next_cursor": page.next_cursor})
    page = listings.list_outbox(
        conn, request.where, limit=request.limit, cursor=request.cursor, max_page=max_rows
    )
    return Answer({"messages": page.rows, "next_cursor": page.next_cursor})


def _pauses(conn: Connection[Any]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(p) for p in pauses.active_pauses(conn)]


def _pause(conn: Connection[Any], request: requests.Pause, caller: Caller) -> Answer:
    key = {"provider": request.provider, "type": request.event_type}
    with conn.transaction():
        since = pauses.pause(
            conn, request.provider, request.event_type, reason=request.reason, by=caller.operator
        )
    if since is None:
        raise OperatorConflict(
            f"{request.provider} {request.event_type} is paused already (webhook-inbox paused)"
        )
    return Answer({**key, "paused_at": since}, log=key)


def _resume(
    conn: Connection[Any], request: requests.Resume, caller: Caller, progress: Progress
) -> Answer:
    """End the pause, then put back what it held, in batches (the sweeper finishes the rest if
    this stops: each batch is its own transaction)."""
    key = {"provider": request.provider, "type": request.event_type}
    with conn.transaction():
        resumed = pauses.resume(conn, request.provider, request.event_type, by=caller.operator)
    if resumed is None:
        raise OperatorNotFound(
            f"{request.provider} {request.event_type} is not paused (webhook-inbox paused)"
        )
    released = 0
    while True:  # a batch per transaction, oldest first: the rows go back as they were held
        with conn.transaction():
            moved = pauses.release_resumed(conn)
        released += moved
        progress(released, 0)
        if moved < pauses.RELEASE_BATCH:
            break
    return Answer({**key, "released": released}, log={**key, "released": released})


def _status(conn: Connection[Any]) -> dict[str, Any]:
    state = listings.system_status(conn)
    return {
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
        "pauses": _pauses(conn),
    }


def _show(conn: Connection[Any], request: requests.EventsShow) -> Answer:
    found = listings.resolve_event_id(conn, request.provider, request.id)
    event = None
    if found.event_id is not None:
        event = listings.get_event(conn, request.provider, found.event_id)
    if event is None:
        choices = "".join(
            f"\n  webhook-inbox events show {request.provider} {e}" for e in found.candidates
        )
        raise OperatorNotFound((found.problem or f"no event {request.id!r}") + choices)
    messages = [f"found by delivery id {request.id!r}"] if found.by_delivery_id else []
    document = {**event, "operator_actions": listings.event_actions(conn, event["id"])}
    log: dict[str, Any] = {"row_id": event["id"]}
    if request.payload:
        document["payload"] = listings.event_payload(conn, event["id"])
        log["payload_read"] = True  # the function's line is the audit of who read it
    return Answer(document, messages, log)


def _replay(
    conn: Connection[Any],
    request: requests.Replay,
    caller: Caller,
    *,
    queue: Queue | None,
    max_rows: int,
    progress: Progress,
) -> Answer:
    rows, missing, notes = _replay_targets(conn, request, max_rows)
    messages: list[str] = []
    result: dict[str, Any] = {"dry_run": request.dry_run, "before": rows, "outcomes": []}
    if not rows:
        result["outcomes"] = [o.as_dict() for o in missing]
        return Answer({**result, "notes": notes}, messages, _counts(missing))
    send = None
    if queue is not None and not request.dry_run:
        send = actions.sqs_sender(
            queue.url,
            queue.client(),
            on_error=lambda e: messages.append(f"warning: send failed: {e}"),
        )
    elif not request.dry_run:
        notes.append(
            "no processing queue (PROCESSING_QUEUE_URL, or the CLI's --queue-url): the sweeper "
            "will enqueue the replayed events on its next run"
        )
    done = 0

    def step(_outcome: ActionOutcome) -> None:
        nonlocal done
        done += 1
        progress(done, len(rows))

    outcomes = missing + actions.replay_events(
        conn,
        [r["id"] for r in rows],
        operator=caller.operator,
        reason=request.reason,
        dry_run=request.dry_run,
        send=send,
        on_progress=step,
    )
    unsent = [o for o in outcomes if o.outcome == "replayed" and not o.enqueued]
    if send and unsent:
        notes.append(
            f"{len(unsent)} replayed event(s) were not sent to the queue; they are safely "
            "'received' and the sweeper will enqueue them on its next run"
        )
    if request.dry_run:
        notes.append(
            "dry run: nothing was written or sent"
            + (f"; would send to {queue.url}" if queue is not None else "")
        )
    result["outcomes"] = [o.as_dict() for o in outcomes]
    return Answer({**result, "notes": notes}, messages, _counts(outcomes))


def _replay_targets(
    conn: Connection[Any], request: requests.Replay, max_rows: int
) -> tuple[list[dict[str, Any]], list[ActionOutcome], list[str]]:
    """The rows to replay, outcomes for ids that name none, and notes for the operator."""
    notes: list[str] = []
    if request.provider is not None:
        provider, keys, missing = request.provider, [], []
        for some_id in request.ids:
            found = listings.resolve_event_id(conn, provider, some_id)
            if found.event_id is None:
                choices = [f"\n  webhook-inbox replay {provider} {e}" for e in found.candidates]
                label = f"{provider}/{some_id}"
                detail = found.problem + "".join(choices)
                missing.append(ActionOutcome(None, label, None, "not_found", detail))
                continue
            if found.by_delivery_id:
                notes.append(f"delivery id {some_id} is event {found.event_id}")
            keys.append(found.event_id)
        return listings.find_events(conn, provider, keys), missing, notes
    if request.where is None:  # requests.parse gives ids or a filter, never neither
        raise OperatorRequestRefused("replay: name events or select them with a filter")
    rows: list[dict[str, Any]] = []
    cursor = None
    while len(rows) < request.max:
        page = listings.list_events(
            conn,
            request.where,
            limit=min(max_rows, request.max - len(rows)),
            cursor=cursor,
            max_page=max_rows,
        )
        rows.extend(page.rows)
        cursor = page.next_cursor
        if cursor is None:
            break
    if cursor is not None:
        notes.append(
            f"more events match than --max {request.max}: only the newest {request.max} "
            "were selected"
        )
    if request.only_rows is not None:
        shown = set(request.only_rows)
        gone = len(shown - {r["id"] for r in rows})
        rows = [r for r in rows if r["id"] in shown]
        if gone:
            notes.append(f"{gone} event(s) confirmed no longer match the filter: left alone")
    rows.sort(key=lambda r: r["id"])  # replay in arrival order
    return rows, [], notes


def _outbox_retry(
    conn: Connection[Any], request: requests.OutboxRetry, caller: Caller, max_rows: int
) -> Answer:
    rows: list[dict[str, Any]] = []
    if request.all_dead:
        where = listings.OutboxFilter(statuses=("dead",), topic=request.topic)
        rows = listings.list_outbox(conn, where, limit=max_rows, max_page=max_rows).rows
        if request.only_ids is not None:
            rows = [r for r in rows if r["id"] in set(request.only_ids)]
        ids = sorted(r["id"] for r in rows)
    else:
        ids = list(request.ids)
    outcomes = [
        actions.retry_outbox_message(
            conn, mid, operator=caller.operator, reason=request.reason, dry_run=request.dry_run
        )
        for mid in ids
    ]
    result = {
        "dry_run": request.dry_run,
        "before": rows,
        "outcomes": [o.as_dict() for o in outcomes],
        "notes": ["dry run: nothing was written"] if request.dry_run else [],
    }
    return Answer(result, [], _counts(outcomes))


def _counts(outcomes: list[ActionOutcome]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome.outcome] = counts.get(outcome.outcome, 0) + 1
    return {"outcomes": counts}


# --- the wire ------------------------------------------------------------------------------


def json_default(value: Any) -> Any:
    """How the operator's answers (and the CLI's --json) write what JSON has no type for."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def encode(value: Any) -> str:
    """JSON as the operator's answers travel: timestamps as ISO 8601, compact, UTF-8 text."""
    return json.dumps(value, default=json_default, ensure_ascii=False, separators=(",", ":"))
