"""Idle means idle: whether this sweeper run may leave the database alone, and the record that
lets the next one decide (the objects in :mod:`webhook_inbox.idle_ledger`).

A run may skip the database only when all of these hold:

* the record exists and says its run found nothing to do (``quiet``): a run that did work
  writes ``quiet: false``, so the next run looks again;
* no writer's activity mark reaches past the start of that run (less :data:`MARK_MARGIN_S`):
  everything the functions wrote was already in the database when the run read it;
* the earliest moment the database said work can come due (``next_due``: an expired lease, a
  retry or a re-wake due, a message due, a circuit's probe, retention) is still ahead;
* the run is younger than ``IDLE_MAX_SKIP_SECONDS`` (a backstop for writes no mark announces:
  SQL typed by hand, a forgotten tool).

Anything unreadable counts as activity: the run connects. While it skips, the run reports the
backlog that quiet run measured, its ages advanced by the time since, so the alarms that watch
ages (held events, a long pause, a waiting retry) go on seeing them grow.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg import Connection

from webhook_inbox import aws, idle_ledger
from webhook_inbox.errors import LedgerUnavailable
from webhook_inbox.idle_ledger import MARK_MARGIN_S
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.settings import SweeperSettings
from webhook_inbox.store import inbox_upkeep, outbox, pauses
from webhook_inbox.store.backlog_metrics import Backlog

# The sweeper's clock and the database's are both synchronised (Amazon Time Sync); work due
# within this is treated as due now. Connecting a run early costs one database visit; late
# would cost a bound.
CLOCK_MARGIN_S = 5.0


@dataclass(frozen=True)
class Verdict:
    """Whether to connect, why (``reason``, for the run's line), and what the decision read."""

    connect: bool
    reason: str
    record_etag: str | None = None  # the record this run read (None: there was none)
    backlog: Backlog | None = None  # skipping: the quiet run's backlog, ages advanced
    next_due: float | None = None


def decide(config: SweeperSettings, now: float, *, forced: bool = False) -> Verdict:
    """Read the ledger and decide (``forced``: an operator asked for a full run)."""
    bucket = config.idle_ledger_bucket
    if not bucket:
        return Verdict(True, "no_ledger")
    try:
        record = read(bucket, idle_ledger.RECORD_KEY)
        activity = read(bucket, idle_ledger.ACTIVITY_KEY)
    except LedgerUnavailable as exc:
        return Verdict(True, f"ledger_unreadable: {exc}")
    etag = record.etag if record else None
    if forced or record is None:
        return Verdict(True, "forced" if forced else "no_record", etag)
    try:
        return _judge(config, now, record.document, activity, etag)
    except (KeyError, TypeError, ValueError):
        return Verdict(True, "record_invalid", etag)


def _judge(
    config: SweeperSettings,
    now: float,
    document: dict[str, Any],
    activity: Stored | None,
    etag: str | None,
) -> Verdict:
    if document["quiet"] is not True:
        return Verdict(True, "work_done", etag)
    started = float(document["started_at"])
    next_due = None if document["next_due"] is None else float(document["next_due"])
    until = float(activity.document["until"]) if activity else 0.0
    reasons = (
        ("activity", until + MARK_MARGIN_S > started),
        ("due", next_due is not None and now + CLOCK_MARGIN_S >= next_due),
        ("max_skip", now >= started + config.idle_max_skip_seconds),
    )
    for reason, holds in reasons:
        if holds:
            return Verdict(True, reason, etag)
    backlog = Backlog(**document["backlog"])
    # Measured during that run: advanced from its start, so at most its duration too old.
    advanced = _advanced(backlog, now - started)
    return Verdict(False, "idle", etag, advanced, next_due)


def next_due(conn: Connection[Any], config: SweeperSettings) -> float | None:
    """The earliest moment the database says the sweeper has work (epoch s); None: none."""
    found = [
        inbox_upkeep.next_due(
            conn,
            stale_seconds=config.reenqueue_stale_seconds,
            payload_days=config.payload_retention_days,
            key_days=config.key_retention_days,
        ),
        outbox.next_due(conn, key_days=config.key_retention_days),
        pauses.next_due(conn, window_seconds=config.circuit_window_seconds),
    ]
    due = [moment for moment in found if moment is not None]
    return min(due) if due else None


def was_quiet(report: SweepReport) -> bool:
    """A run that changed nothing, finished every step and met no error: what it read is all
    there is. Any other run has the next one look again."""
    changed = (
        report.leases_expired,
        report.held_released,
        report.probes_sent,
        report.reenqueued,
        report.rewoken,
        report.enqueue_failed,
        report.outbox_published,
        report.outbox_retried,
        report.outbox_dead,
        report.outbox_released,
        report.payloads_purged,
        report.events_deleted,
        report.outbox_deleted,
        # The switch made: the next run creates the partitions ahead it did not. (A partition
        # created or dropped changes nothing a later run must look at sooner: retention goes on
        # until done or stops early, and partitions exist a week ahead, past the daily run.)
        report.partitions_switched,
    )
    return (
        not any(changed)
        and report.stopped_early_at is None
        and not report.errors
        and report.backlog is not None
    )


def record_run(
    config: SweeperSettings,
    verdict: Verdict,
    *,
    started_at: float,
    report: SweepReport,
    due: float | None,
) -> str:
    """Write the record of a database run; what happened to it (for the run's line).

    A quiet run's record replaces only the record this run read (a conditional PUT): a run
    that overlapped it and did work may have written since, and its ``quiet: false`` stands.
    A run that did work overwrites whatever is there.
    """
    bucket = config.idle_ledger_bucket
    if not bucket:
        return "no_ledger"
    quiet = was_quiet(report)
    document: dict[str, Any] = {"quiet": quiet, "run": uuid.uuid4().hex}
    if quiet and report.backlog is not None:
        document |= {
            "started_at": started_at,
            "next_due": due,
            "backlog": dataclasses.asdict(report.backlog),
        }
    # No record read (none, or unreadable): only if there is still none.
    condition = (verdict.record_etag or "*") if quiet else None
    try:
        written = write(bucket, idle_ledger.RECORD_KEY, document, if_match=condition)
    except LedgerUnavailable as exc:
        return f"failed: {exc}"
    if not written:
        return "superseded"
    return "quiet" if quiet else "work_done"


def _advanced(backlog: Backlog, elapsed_s: float) -> Backlog:
    """The backlog ``elapsed_s`` later with nothing written: same counts, older ages."""
    elapsed = max(elapsed_s, 0.0)

    def older(age: float) -> float:
        return age + elapsed if age else 0.0

    return dataclasses.replace(
        backlog,
        oldest_unprocessed_age_seconds=older(backlog.oldest_unprocessed_age_seconds),
        oldest_outbox_age_seconds=older(backlog.oldest_outbox_age_seconds),
        oldest_held_age_seconds=older(backlog.oldest_held_age_seconds),
        oldest_pause_age_seconds=older(backlog.oldest_pause_age_seconds),
    )


# --- the ledger's objects, as the sweeper reads and writes them ---------------------------


@dataclass(frozen=True)
class Stored:
    """An object read from the ledger: its JSON document and its ETag (for a conditional PUT)."""

    document: dict[str, Any]
    etag: str


def read(bucket: str, key: str) -> Stored | None:
    """The object's document, or None when there is none; raises :class:`LedgerUnavailable`."""
    from botocore.exceptions import ClientError

    try:
        answer = idle_ledger.client().get_object(Bucket=bucket, Key=key)
        body = answer["Body"].read()
    except ClientError as exc:
        if aws.error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise LedgerUnavailable(aws.error_code(exc)) from exc
    except idle_ledger.aws_errors() as exc:
        raise LedgerUnavailable(aws.error_code(exc)) from exc
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise LedgerUnavailable("invalid_document") from exc
    if not isinstance(document, dict):
        raise LedgerUnavailable("invalid_document")
    return Stored(document=document, etag=str(answer.get("ETag", "")))


def write(bucket: str, key: str, document: dict[str, Any], *, if_match: str | None = None) -> bool:
    """Write the object; with ``if_match`` (an ETag, or ``"*"``: only if absent) only while it
    is unchanged. False when that condition failed; raises :class:`LedgerUnavailable`."""
    from botocore.exceptions import ClientError

    condition: dict[str, str] = {}
    if if_match == "*":
        condition["IfNoneMatch"] = "*"
    elif if_match:
        condition["IfMatch"] = if_match
    try:
        idle_ledger.client().put_object(
            Bucket=bucket,
            Key=key,
            Body=json.dumps(document).encode(),
            ContentType="application/json",
            **condition,
        )
    except ClientError as exc:
        if aws.error_code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            return False
        raise LedgerUnavailable(aws.error_code(exc)) from exc
    except idle_ledger.aws_errors() as exc:
        raise LedgerUnavailable(aws.error_code(exc)) from exc
    return True
