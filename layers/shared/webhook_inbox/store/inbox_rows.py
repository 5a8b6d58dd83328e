"""The rows :mod:`webhook_inbox.store.inbox` hands back (plain data, no SQL: kept apart so the data
module stays readable; ``webhook_inbox.store.inbox`` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class JsonText:
    """A payload that is already JSON text, checked to be what jsonb accepts (ingest's body as it
    came): stored as sent, without serialising a parsed copy again."""

    text: str


@dataclass(frozen=True)
class NewEvent:
    """One authentic event to store: its key, type, informational delivery id and payload (a
    JSON-serialisable value, or :class:`JsonText`)."""

    event_id: str
    event_type: str
    payload: Any
    delivery_id: str | None = None


@dataclass(frozen=True)
class ClaimResult:
    id: int
    event_id: str
    status: str
    delivery_count: int
    is_new: bool
    counted: bool = True  # false: a duplicate answered without waiting to count it
    rewake: bool = False  # a duplicate of a waiting row, stamped again: send its wake-up


@dataclass(frozen=True)
class LeasedEvent:
    id: int
    provider: str
    event_id: str
    delivery_id: str | None
    event_type: str
    payload: Any
    attempts: int
    received_at: datetime
    # None only for a row the lease dead-lettered instead (Leases.dead_lettered): it holds none.
    lease_expires_at: datetime | None
    error_kind: str | None = None  # the previous attempt's (None: first attempt, or it succeeded)


@dataclass(frozen=True)
class Leases:
    """What one lease statement did: the rows it leased, the rows taken over from an expired
    lease with their attempts spent, which it dead-lettered instead (``lease_expired``), and the
    rows a pause holds."""

    leased: list[LeasedEvent] = field(default_factory=list)
    dead_lettered: list[LeasedEvent] = field(default_factory=list)
    held: list[int] = field(default_factory=list)  # an active pause matched: held, not leased
    # Providers with a handler in a run of failures: a success of theirs must end the run.
    failing: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class StatusBacklog:
    """One status's share of the backlog: how many rows, and the oldest one's age."""

    status: str
    count: int
    oldest_age_seconds: float


@dataclass(frozen=True)
class StatusSummary:
    status: str
    count: int
    oldest_received_at: datetime | None
