"""What the pages show: the events list's query (its URL's parameters), the templates (Jinja2,
autoescaped, shipped in the package) and the small formatting helpers they use."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import quote, urlencode

from webhook_inbox.errors import OperatorRequestRefused
from webhook_inbox.store import inbox
from webhook_inbox_tools.cli import render as cli_render
from webhook_inbox_tools.cli.params import when


@dataclass(frozen=True)
class EventQuery:
    """The events list's filter as its URL carries it: ``q`` (an event or delivery id),
    ``provider``, ``type``, ``status`` (repeatable), ``since`` / ``until`` (an ISO time or an age
    such as 2h), ``cursor``."""

    q: str = ""
    provider: str = ""
    event_type: str = ""
    statuses: tuple[str, ...] = ()
    since: str = ""
    until: str = ""
    cursor: int | None = None

    @classmethod
    def parse(cls, query: Sequence[tuple[str, str]]) -> EventQuery:
        single = {k: v.strip() for k, v in query if k != "status"}
        statuses = tuple(dict.fromkeys(v for k, v in query if k == "status" and v))
        wrong = [s for s in statuses if s not in inbox.STATUSES]
        if wrong:
            raise OperatorRequestRefused(f"status {wrong[0]!r} is not one of the statuses")
        cursor = single.get("cursor", "")
        if cursor and not cursor.isdigit():
            raise OperatorRequestRefused("cursor: a number, as the page's 'older' link gives")
        return cls(
            q=single.get("q", ""),
            provider=single.get("provider", ""),
            event_type=single.get("type", ""),
            statuses=statuses,
            since=single.get("since", ""),
            until=single.get("until", ""),
            cursor=int(cursor) if cursor else None,
        )

    def filter(self) -> dict[str, Any]:
        """The operator request's ``filter`` (what ``events list`` and ``replay`` take)."""
        where: dict[str, Any] = {
            "id": self.q or None,
            "provider": self.provider or None,
            "type": self.event_type or None,
            "status": list(self.statuses) or None,
            "since": _time(self.since, "since"),
            "until": _time(self.until, "until"),
        }
        return {k: v for k, v in where.items() if v is not None}

    def params(self, *, cursor: int | None = None) -> list[tuple[str, str]]:
        pairs = [
            ("q", self.q),
            ("provider", self.provider),
            ("type", self.event_type),
            *(("status", s) for s in self.statuses),
            ("since", self.since),
            ("until", self.until),
            ("cursor", str(cursor) if cursor else ""),
        ]
        return [(k, v) for k, v in pairs if v]

    def url(self, *, cursor: int | None = None) -> str:
        pairs = self.params(cursor=cursor)
        return "/events" + (f"?{urlencode(pairs)}" if pairs else "")

    @property
    def filtered(self) -> bool:
        return bool(self.filter())


def _time(text: str, name: str) -> str | None:
    if not text:
        return None
    try:
        return when(text).isoformat()
    except argparse.ArgumentTypeError as exc:
        raise OperatorRequestRefused(f"{name}: {exc}") from None


def event_url(event: dict[str, Any]) -> str:
    return f"/events/{quote(event['provider'], safe='')}/{quote(event['event_id'], safe='')}"


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def age(value: Any) -> str:
    moment = _parse_time(value)
    return cli_render.age(moment) if moment else "-"


def clock(value: Any) -> str:
    moment = _parse_time(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "-"


@cache
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("webhook_inbox_tools.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(age=age, clock=clock, event_url=event_url)
    env.globals.update(
        statuses=inbox.STATUSES,
        urlencode=urlencode,
        to_json=cli_render.to_json,
    )
    return env


def render(template: str, **context: Any) -> str:
    return str(_environment().get_template(template).render(**context))
