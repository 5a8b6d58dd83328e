"""Health at a glance: the backlog by status with its oldest age, from the operator's ``status``.

The backlog over time is drawn in the browser from samples of ``/health.json`` taken while the
page is open (the stack keeps no history of its backlog: its metrics are CloudWatch's), which
is what watching a backlog drain needs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from webhook_inbox.operations.commands import Answer, json_default

if TYPE_CHECKING:
    from webhook_inbox_tools.console.pages import Reply

# What a backlog is: the statuses still owed work (the rest are done, one way or another).
BACKLOG_STATUSES = ("received", "processing", "failed")


def backlog(status: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per status, those owed work first, with a count and the oldest's receipt."""
    events = status.get("events") or {}
    rows = []
    for name in (*BACKLOG_STATUSES, "dead_letter", "processed", "ignored"):
        found = events.get(name) or {}
        rows.append(
            {
                "status": name,
                "count": int(found.get("count") or 0),
                "oldest_received_at": found.get("oldest_received_at"),
                "backlog": name in BACKLOG_STATUSES,
            }
        )
    return rows


def sample(call: Callable[[dict[str, Any]], Answer]) -> Reply:
    """One point for the live backlog plot: counts per status now, and the oldest age (s)."""
    from webhook_inbox_tools.console.pages import Reply

    status = call({"command": "status"}).result
    counts = {row["status"]: row["count"] for row in backlog(status)}
    oldest = status.get("oldest_unfinished_received_at")
    now = datetime.now(UTC)
    age_s = None
    if oldest:
        moment = datetime.fromisoformat(oldest)
        age_s = max(0.0, (now - moment).total_seconds())
    point = {
        "at": now.timestamp(),
        "counts": counts,
        "oldest_unfinished_age_s": age_s,
        "outbox_pending": status.get("outbox", {}).get("pending", 0),
        "outbox_dead": status.get("outbox", {}).get("dead", 0),
    }
    return Reply(200, json.dumps(point, default=json_default), "application/json; charset=utf-8")
