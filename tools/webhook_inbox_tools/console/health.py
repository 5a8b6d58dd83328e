"""Health at a glance: the backlog by status with its oldest age, from the operator's ``status``;
per provider, what arrived, was redelivered and was refused in a chosen window, from ``traffic``
and the refusals' source (:mod:`.rejections`), with arrivals per bucket for the plot.

The backlog over time is drawn in the browser from samples of ``/health.json`` taken while the
page is open (the stack keeps no history of its backlog: its metrics are CloudWatch's), which
is what watching a backlog drain needs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from webhook_inbox.operations.commands import Answer, json_default

if TYPE_CHECKING:
    from webhook_inbox_tools.console.pages import Reply
    from webhook_inbox_tools.console.rejections import Source


@dataclass(frozen=True)
class Window:
    name: str
    length: timedelta
    bucket_seconds: int  # a plot of 48 to 60 points


WINDOWS = {
    w.name: w
    for w in (
        Window("1h", timedelta(hours=1), 60),
        Window("24h", timedelta(hours=24), 1800),
        Window("7d", timedelta(days=7), 3 * 3600),
    )
}
DEFAULT_WINDOW = "24h"

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


def traffic(
    call: Callable[[dict[str, Any]], Answer], refused_source: Source, window: Window
) -> dict[str, Any]:
    """Per provider: accepted, duplicates, refused, last delivery; the top refusal reasons; the
    arrivals as uPlot's columns (bucket times, then one count column per provider)."""
    since = datetime.now(UTC) - window.length
    found = call(
        {"command": "traffic", "since": since.isoformat(), "bucket_seconds": window.bucket_seconds}
    ).result
    names = sorted({row["provider"] for row in found["providers"]})
    refused = refused_source(names, since, window.length)
    names = sorted(set(names) | set(refused.by_provider))
    by_name = {row["provider"]: row for row in found["providers"]}
    rows = [
        {
            "provider": name,
            "accepted": int(by_name.get(name, {}).get("accepted") or 0),
            "duplicates": int(by_name.get(name, {}).get("duplicates") or 0),
            "refused": refused.by_provider.get(name, 0) if refused.counted else None,
            "last_delivery_at": by_name.get(name, {}).get("last_delivery_at"),
        }
        for name in names
    ]
    return {
        "window": window,
        "rows": rows,
        "reasons": refused.reasons,
        "notes": refused.notes,
        "plot": _columns(found["arrivals"], since, window),
    }


def _columns(arrivals: list[dict[str, Any]], since: datetime, window: Window) -> dict[str, Any]:
    """Every bucket of the window (empty ones as 0: a gap is a fact worth seeing)."""
    providers = sorted({a["provider"] for a in arrivals})
    count = int(window.length.total_seconds() // window.bucket_seconds) + 1
    starts = [since.timestamp() + i * window.bucket_seconds for i in range(count)]
    columns = {p: [0] * count for p in providers}
    for a in arrivals:
        at = datetime.fromisoformat(a["bucket"]).timestamp()
        index = round((at - starts[0]) / window.bucket_seconds)
        if 0 <= index < count:
            columns[a["provider"]][index] += int(a["events"])
    return {"x": starts, "series": [{"provider": p, "counts": columns[p]} for p in providers]}
