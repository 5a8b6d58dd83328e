"""An operator's command as one JSON object: what the CLI sends and the operator function reads.

``{"command": "events list", "filter": {"status": ["dead_letter"]}, "limit": 50}``. Every key is
checked (an unknown one, a wrong type or an out-of-range number is refused with a message that
names it), so a typo never widens what a replay selects. The caller is never part of the request:
the operator function takes it from what AWS authenticated, the CLI on a database of its own from
``--operator``. A body's ``operator`` key, which an older or hand-written client may send, is
accepted and ignored.

Commands and the level each needs (:func:`level_needed`): ``status``, ``events list``, ``events
show``, ``outbox list``, ``paused`` and ``traffic`` read; ``replay``, ``outbox retry``,
``pause``, ``resume`` and ``events show`` with ``"payload": true`` act.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook_inbox.errors import OperatorRequestRefused
from webhook_inbox.operations.listings import OUTBOX_STATUSES, EventFilter, OutboxFilter
from webhook_inbox.store import inbox

READ, ACT = "read", "act"
COMMANDS = (
    "status", "events list", "events show", "replay", "outbox list", "outbox retry",
    "paused", "pause", "resume", "traffic",
)  # fmt: skip
IGNORED_KEYS = frozenset({"operator"})
MAX_REASON = 1000
_TEXT_LIMIT = 255  # provider names, event ids, types, topics: the schema's own bounds


@dataclass(frozen=True)
class Status:
    pass


@dataclass(frozen=True)
class EventsList:
    where: EventFilter
    limit: int
    cursor: int | None


@dataclass(frozen=True)
class EventsShow:
    provider: str
    id: str  # the event id, or the provider's delivery id for it
    payload: bool


@dataclass(frozen=True)
class Replay:
    provider: str | None  # with ids: the events named
    ids: tuple[str, ...]
    where: EventFilter | None  # or a filtered set, at most ``max`` of the newest
    max: int
    reason: str
    dry_run: bool
    confirmed: bool  # the operator saw the filtered set and said yes (the CLI asks)
    only_rows: tuple[int, ...] | None  # of the filtered set, only these rows (the ones shown)


@dataclass(frozen=True)
class OutboxList:
    where: OutboxFilter
    limit: int
    cursor: int | None


@dataclass(frozen=True)
class OutboxRetry:
    ids: tuple[int, ...]
    all_dead: bool
    topic: str | None
    reason: str
    dry_run: bool
    confirmed: bool
    only_ids: tuple[int, ...] | None


@dataclass(frozen=True)
class Paused:
    pass


@dataclass(frozen=True)
class Pause:
    provider: str
    event_type: str  # an exact type, a prefix ending in "*", or "*" for every type
    reason: str


@dataclass(frozen=True)
class Resume:
    provider: str
    event_type: str


@dataclass(frozen=True)
class Traffic:
    """Per provider over [since, until): events received, redeliveries, arrivals per bucket."""

    since: datetime
    until: datetime | None
    bucket_seconds: int


# A plot's worth of points: more buckets than this in a window is a bucket too small for it.
MAX_BUCKETS = 1000

Request = (
    Status
    | EventsList
    | EventsShow
    | Replay
    | OutboxList
    | OutboxRetry
    | Paused
    | Pause
    | Resume
    | Traffic
)


def level_needed(request: Request) -> str:
    if isinstance(request, Replay | OutboxRetry | Pause | Resume):
        return ACT
    if isinstance(request, EventsShow) and request.payload:
        return ACT
    return READ


def command_of(body: Any) -> str:
    """The command a body names, checked."""
    if not isinstance(body, Mapping):
        raise OperatorRequestRefused("the request must be a JSON object")
    command = body.get("command")
    if command not in COMMANDS:
        raise OperatorRequestRefused(
            f"unknown command {command!r}: one of {', '.join(repr(c) for c in COMMANDS)}"
        )
    return str(command)


def parse(body: Any, *, max_rows: int) -> Request:
    """The request ``body`` asks for; ``max_rows`` bounds every page and every selected set."""
    command = command_of(body)
    fields = _Fields(body, command)
    request: Request
    if command == "status":
        request = Status()
    elif command == "events list":
        request = EventsList(_event_filter(fields.mapping("filter")), *_paging(fields, max_rows))
    elif command == "events show":
        request = EventsShow(
            fields.text("provider", required=True) or "",
            fields.text("id", required=True) or "",
            fields.flag("payload"),
        )
    elif command == "replay":
        request = _replay(fields, max_rows)
    elif command == "outbox list":
        request = OutboxList(_outbox_filter(fields.mapping("filter")), *_paging(fields, max_rows))
    elif command == "outbox retry":
        request = _outbox_retry(fields, max_rows)
    elif command == "paused":
        request = Paused()
    elif command == "traffic":
        request = _traffic(fields)
    else:
        provider = fields.text("provider", required=True) or ""
        event_type = fields.text("type") or "*"
        if "*" in event_type[:-1]:
            raise OperatorRequestRefused(
                f"{command}: type {event_type!r} is not an event type, a prefix ending in '*' "
                "(invoice.*) or '*'"
            )
        if command == "pause":
            request = Pause(provider, event_type, _reason(fields))
        else:
            request = Resume(provider, event_type)
    fields.done()
    return request


def _traffic(fields: _Fields) -> Traffic:
    since = fields.time("since")
    if since is None:
        raise OperatorRequestRefused("traffic: since is required (an ISO 8601 time)")
    until = fields.time("until")
    bucket = fields.number("bucket_seconds", 60, 86_400, default=3600)
    end = until or datetime.now(UTC)
    if end <= since:
        raise OperatorRequestRefused("traffic: until must be after since")
    if (end - since).total_seconds() / bucket > MAX_BUCKETS:
        raise OperatorRequestRefused(
            f"traffic: at most {MAX_BUCKETS} buckets: a larger bucket_seconds for this window"
        )
    return Traffic(since, until, bucket)


def _paging(fields: _Fields, max_rows: int) -> tuple[int, int | None]:
    return fields.number("limit", 1, max_rows, default=50), fields.number("cursor", 1, None)


def _replay(fields: _Fields, max_rows: int) -> Replay:
    provider = fields.text("provider")
    ids = tuple(fields.texts("ids", max_rows))
    where = _event_filter(fields.mapping("filter")) if "filter" in fields.body else None
    if (provider is None) != (not ids):
        raise OperatorRequestRefused("replay: give provider and ids together")
    if bool(ids) == (where is not None and not where.is_empty()):
        raise OperatorRequestRefused(
            "replay: name events (provider and ids) or select them with a filter, not both"
        )
    if where is not None and where.is_empty():
        where = None
    max_events = fields.number("max", 1, max_rows, default=max_rows)
    reason, dry_run, confirmed = _action_fields(fields)
    only = tuple(fields.numbers("only_rows", max_rows)) if "only_rows" in fields.body else None
    if where is not None and not dry_run and not confirmed:
        raise OperatorRequestRefused(
            "replay: a filtered set is replayed only once the operator has confirmed it "
            '("confirmed": true; the CLI asks first, or takes --yes)'
        )
    if only is not None and where is None:
        raise OperatorRequestRefused("replay: only_rows narrows a filtered set")
    return Replay(provider, ids, where, max_events, reason, dry_run, confirmed, only)


def _outbox_retry(fields: _Fields, max_rows: int) -> OutboxRetry:
    ids = tuple(fields.numbers("ids", max_rows))
    all_dead = fields.flag("all_dead")
    topic = fields.text("topic")
    if bool(ids) == all_dead:
        raise OperatorRequestRefused("outbox retry: give message ids, or all_dead")
    if topic is not None and not all_dead:
        raise OperatorRequestRefused("outbox retry: topic selects messages only with all_dead")
    reason, dry_run, confirmed = _action_fields(fields)
    only = tuple(fields.numbers("only_ids", max_rows)) if "only_ids" in fields.body else None
    if all_dead and not dry_run and not confirmed:
        raise OperatorRequestRefused(
            "outbox retry: all_dead retries only once the operator has confirmed the set "
            '("confirmed": true; the CLI asks first, or takes --yes)'
        )
    if only is not None and not all_dead:
        raise OperatorRequestRefused("outbox retry: only_ids narrows all_dead")
    return OutboxRetry(ids, all_dead, topic, reason, dry_run, confirmed, only)


def _action_fields(fields: _Fields) -> tuple[str, bool, bool]:
    return _reason(fields), fields.flag("dry_run"), fields.flag("confirmed")


def _reason(fields: _Fields) -> str:
    reason = (fields.text("reason", required=True, limit=MAX_REASON) or "").strip()
    if not reason:
        raise OperatorRequestRefused("reason: cannot be empty")
    return reason


def _event_filter(raw: _Fields) -> EventFilter:
    where = EventFilter(
        statuses=raw.choices("status", inbox.STATUSES),
        provider=raw.text("provider"),
        event_type=raw.text("type"),
        since=raw.time("since"),
        until=raw.time("until"),
        some_id=raw.text("id"),
    )
    raw.done()
    return where


def _outbox_filter(raw: _Fields) -> OutboxFilter:
    where = OutboxFilter(
        statuses=raw.choices("status", OUTBOX_STATUSES),
        topic=raw.text("topic"),
        since=raw.time("since"),
        until=raw.time("until"),
        source_event=raw.number("event", 1, None),
    )
    raw.done()
    return where


class _Fields:
    """One JSON object's keys, each read once with its type checked; :meth:`done` refuses the
    keys nobody read."""

    def __init__(self, body: Mapping[str, Any], where: str) -> None:
        self.body = body
        self.where = where
        self.read = {"command"} if "command" in body else set()

    def _get(self, key: str) -> Any:
        self.read.add(key)
        return self.body.get(key)

    def _refuse(self, key: str, what: str) -> OperatorRequestRefused:
        return OperatorRequestRefused(f"{self.where}: {key} must be {what}")

    def done(self) -> None:
        unknown = sorted(set(self.body) - self.read - IGNORED_KEYS)
        if unknown:
            raise OperatorRequestRefused(f"{self.where}: unknown key(s) {', '.join(unknown)}")

    def text(self, key: str, *, required: bool = False, limit: int = _TEXT_LIMIT) -> str | None:
        value = self._get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value or len(value) > limit:
            raise self._refuse(key, f"a non-empty string of at most {limit} characters")
        return value

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self._refuse(key, "true or false")
        return value

    def number(self, key: str, low: int, high: int | None, default: int | None = None) -> Any:
        value = self._get(key)
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise self._refuse(key, f"a whole number of at least {low}")
        if high is not None and value > high:
            raise self._refuse(key, f"at most {high}")
        return value

    def numbers(self, key: str, most: int) -> list[int]:
        values = self._list(key, most)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise self._refuse(key, "a list of positive whole numbers")
        return list(dict.fromkeys(values))

    def texts(self, key: str, most: int) -> list[str]:
        values = self._list(key, most)
        if not all(isinstance(v, str) and 0 < len(v) <= _TEXT_LIMIT for v in values):
            raise self._refuse(key, f"a list of strings of 1 to {_TEXT_LIMIT} characters")
        return list(dict.fromkeys(values))

    def _list(self, key: str, most: int) -> list[Any]:
        value = self._get(key)
        if value is None:
            return []
        if not isinstance(value, list) or len(value) > most:
            raise self._refuse(key, f"a list of at most {most} items")
        return value

    def choices(self, key: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
        values = self._list(key, len(allowed))
        wrong = [v for v in values if v not in allowed]
        if wrong:
            raise self._refuse(key, f"a list of {', '.join(allowed)} (not {wrong[0]!r})")
        return tuple(dict.fromkeys(values))

    def time(self, key: str) -> datetime | None:
        value = self._get(key)
        parsed = None
        if value is not None:
            try:
                parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
            except ValueError:
                parsed = None
            if parsed is None:
                raise self._refuse(key, "an ISO 8601 time (UTC when it has no offset)")
            parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        return parsed

    def mapping(self, key: str) -> _Fields:
        value = self._get(key)
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise self._refuse(key, "a JSON object")
        return _Fields(value, f"{self.where} {key}")
