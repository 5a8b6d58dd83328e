"""Where the health page finds the deliveries that were refused: they never reach the inbox, so
no operator command can count them.

- a deployed stack (``--stack``): its CloudWatch metrics, ``RejectedByProvider`` per provider
  (what ``providers list --stack`` reads), with the operator's own AWS credentials — they need
  ``cloudwatch:GetMetricData``, which the stack's operator policies do not grant; without it the
  page says so. The reasons are a stack-wide metric (``Rejected`` by ``reason``), not per provider:
  not shown here;
- ``webhook-inbox dev``: the table dev keeps of what it refused (``dev_refused_deliveries``, what
  ``events rejected`` reads) in its own database, per provider and reason. Only dev's database
  has it; another database gives nothing, and the page says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from webhook_inbox.errors import StoreError


@dataclass
class Refused:
    by_provider: dict[str, int] = field(default_factory=dict)
    reasons: list[dict[str, Any]] = field(default_factory=list)  # provider, reason, refused
    notes: list[str] = field(default_factory=list)
    counted: bool = False  # whether by_provider means anything (else: "-")


# (providers to count, since, window) -> what was refused
Source = Callable[[list[str], datetime, timedelta], Refused]
TOP_REASONS = 10


def from_dev_database(url: str) -> Source:
    def read(_names: list[str], since: datetime, _window: timedelta) -> Refused:
        from webhook_inbox.store import db
        from webhook_inbox_tools.dev import refusals

        try:
            with db.connect(url, application_name="webhook-inbox-console") as conn:
                rows = refusals.reasons(conn, since=since, limit=1000)
        except StoreError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return Refused(notes=[f"refused deliveries: the database: {first}"])
        if rows is None:
            return Refused(
                notes=["refused deliveries are counted by dev and by a stack's metrics only"]
            )
        found = Refused(reasons=rows[:TOP_REASONS], counted=True)
        for row in rows:
            provider = row["provider"]
            found.by_provider[provider] = found.by_provider.get(provider, 0) + row["refused"]
        return found

    return read


def from_stack_metrics(stack: str, region: str) -> Source:
    def read(names: list[str], _since: datetime, window: timedelta) -> Refused:
        from webhook_inbox_tools.cli.providers.target import Target, _client_factory
        from webhook_inbox_tools.cli.providers.traffic import rejected_from_metrics

        target = Target(f"stack {stack}", _client_factory(region), stack_name=stack)
        report = rejected_from_metrics(target, names, window)
        counts = {name: t.rejected for name, t in report.by_provider.items()}
        counted = bool(counts) and all(v is not None for v in counts.values())
        return Refused(
            by_provider={k: int(v or 0) for k, v in counts.items()},
            notes=[*report.notes, "reasons: the stack's Rejected metric, by reason (dashboard)"],
            counted=counted,
        )

    return read


def nowhere(_names: list[str], _since: datetime, _window: timedelta) -> Refused:
    return Refused(notes=["refused deliveries are counted by dev and by a stack's metrics only"])
