"""What an operator changes: replay events and retry dead outbox messages, each audited.

Plain functions over a psycopg connection in autocommit mode; each write runs in its own
transaction so one refused row never blocks the others. The statements are the named blocks of
``sql/operator_actions.sql`` beside this module.

Replay semantics (docs/operate.md, "Replay"): the row goes back to ``received`` with
``available_at = now()`` and ``attempts = 0`` — a dead-lettered row that kept its attempts would be
dead-lettered again on its first failure — and the ``operator_actions`` row written in the same
transaction keeps the status, attempts and error the reset erased. A row under a live lease, or
locked by a worker's open transaction, is refused; so is a row whose payload retention purged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from psycopg import Connection
from psycopg.rows import dict_row

from webhook_inbox import aws
from webhook_inbox.operations.listings import statement
from webhook_inbox.store import inbox
from webhook_inbox.store.store_errors import translated


@dataclass
class ActionOutcome:
    """What happened (or, in a dry run, would happen) to one row."""

    id: int | None  # None for an explicit id that matched no row
    label: str  # "provider/event_id" or "outbox #id", for humans
    previous_status: str | None
    outcome: str  # replayed | would_replay | retried | would_retry | refused | not_found
    detail: str = ""
    enqueued: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome not in {"refused", "not_found"}

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(data.pop("extra"))
        return data


def replay_refusal(row: dict[str, Any]) -> str | None:
    """Why a row must not be replayed now, or None when it may be."""
    if row["status"] == "processing" and row["lease_live"]:
        return f"under a live lease held by {row['lease_owner']}; wait for it to finish or expire"
    if row["payload_purged"]:
        return "payload was purged by retention; nothing left to process"
    return None


def _audit(conn: Connection[Any], **values: Any) -> None:
    base = {
        "event_row_id": None,
        "outbox_id": None,
        "previous_attempts": None,
        "previous_error_kind": None,
        "previous_last_error": None,
    }
    conn.execute(statement("record_action"), {**base, **values})


@translated
def replay_event(
    conn: Connection[Any], event_row_id: int, *, operator: str, reason: str, dry_run: bool
) -> ActionOutcome:
    """Reset one event row to ``received`` and audit it, in one transaction (or only look)."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        name = "peek_event_for_replay" if dry_run else "lock_event_for_replay"
        row = cur.execute(statement(name), {"id": event_row_id}).fetchone()
        if row is None:
            exists = conn.execute(statement("event_payload"), {"id": event_row_id}).fetchone()
            if exists is None:
                return ActionOutcome(event_row_id, f"#{event_row_id}", None, "not_found")
            return ActionOutcome(
                event_row_id,
                f"#{event_row_id}",
                None,
                "refused",
                "locked by a worker's open transaction; try again shortly",
            )
        label = f"{row['provider']}/{row['event_id']}"
        refusal = replay_refusal(row)
        if refusal:
            return ActionOutcome(row["id"], label, row["status"], "refused", refusal)
        if dry_run:
            return ActionOutcome(
                row["id"],
                label,
                row["status"],
                "would_replay",
                f"reset to received, attempts {row['attempts']} -> 0, then enqueue",
            )
        conn.execute(statement("reset_event_for_replay"), {"id": row["id"]})
        _audit(
            conn,
            action="replay",
            operator=operator,
            reason=reason,
            event_row_id=row["id"],
            previous_status=row["status"],
            previous_attempts=row["attempts"],
            previous_error_kind=row["error_kind"],
            previous_last_error=row["last_error"],
        )
    return ActionOutcome(row["id"], label, row["status"], "replayed")


# Sends ids to the processing queue; returns the ids that were accepted.
Sender = Callable[[Sequence[int]], set[int]]


def replay_events(
    conn: Connection[Any],
    event_row_ids: Iterable[int],
    *,
    operator: str,
    reason: str,
    dry_run: bool,
    send: Sender | None,
    on_progress: Callable[[ActionOutcome], None] = lambda _: None,
    batch_size: int = 10,
) -> list[ActionOutcome]:
    """Replay rows one transaction each, then send the replayed ids in batches of ``batch_size``.

    Sending happens after the commit: a message must never point at a row whose reset rolled
    back. When ``send`` is None or a send fails, the row stays ``received`` with no
    ``enqueued_at`` and the sweeper enqueues it on its next run.
    """
    outcomes: list[ActionOutcome] = []
    pending: list[ActionOutcome] = []

    def flush() -> None:
        if not pending:
            return
        accepted = send([o.id for o in pending if o.id is not None]) if send else set()
        if accepted:
            inbox.mark_enqueued(conn, sorted(accepted))
        for outcome in pending:
            outcome.enqueued = outcome.id in accepted
            on_progress(outcome)
        pending.clear()

    for row_id in event_row_ids:
        outcome = replay_event(conn, row_id, operator=operator, reason=reason, dry_run=dry_run)
        outcomes.append(outcome)
        if outcome.outcome == "replayed":
            pending.append(outcome)
            if len(pending) >= batch_size:
                flush()
        else:
            on_progress(outcome)
    flush()
    return outcomes


def sqs_sender(queue_url: str, client: Any, on_error: Callable[[str], None]) -> Sender:
    """A :data:`Sender` over an SQS client: ``{"id": N}`` bodies, as ingest and the sweeper send.

    A failed send is reported to ``on_error`` and leaves those ids out of the accepted set; it
    never raises, because the rows are already committed and the sweeper will send them.
    """

    def send(ids: Sequence[int]) -> set[int]:
        result = aws.send_wakeups(client, queue_url, ids)
        for exc in result.errors:
            on_error(f"{type(exc).__name__}: {exc}")
        for row_id, code in result.rejected:
            on_error(f"message for row {row_id}: {code}")
        return set(result.sent)

    return send


# --- outbox retry --------------------------------------------------------------------------


@translated
def retry_outbox_message(
    conn: Connection[Any], message_id: int, *, operator: str, reason: str, dry_run: bool
) -> ActionOutcome:
    """Move one dead outbox message back to pending with its attempts reset, audited."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        name = "peek_outbox_for_retry" if dry_run else "lock_outbox_for_retry"
        row = cur.execute(statement(name), {"id": message_id}).fetchone()
        label = f"outbox #{message_id}"
        if row is None:
            exists = conn.execute(statement("outbox_exists"), {"ids": [message_id]}).fetchone()
            if exists is None:
                return ActionOutcome(message_id, label, None, "not_found")
            return ActionOutcome(
                message_id, label, None, "refused", "locked by a sweeper; try again shortly"
            )
        if row["status"] != "dead":
            return ActionOutcome(
                message_id, label, row["status"], "refused", "only dead messages are retried"
            )
        if dry_run:
            return ActionOutcome(
                message_id,
                label,
                row["status"],
                "would_retry",
                f"back to pending, attempts {row['attempts']} -> 0",
            )
        conn.execute(statement("reset_outbox_for_retry"), {"id": message_id})
        _audit(
            conn,
            action="outbox_retry",
            operator=operator,
            reason=reason,
            outbox_id=message_id,
            previous_status=row["status"],
            previous_attempts=row["attempts"],
            previous_last_error=row["last_error"],
        )
    return ActionOutcome(message_id, label, "dead", "retried")
