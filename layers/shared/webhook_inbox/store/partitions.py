"""Data layer for the inbox's partitions: the switch to the partitioned layout, partitions created
ahead, and retention that drops whole partitions. SQL in ``sql/partitions.sql``.

``webhook_events`` is partitioned by range of id, one partition per UTC day: an id is
``day << 32 | sequence``, so it names its partition (docs/design.md, "Partitions and retention").
The table as it was before (``webhook_events_legacy``) holds the ids below 2^32.

The switch from the unpartitioned table is made by the sweeper in steps
(:func:`advance_switch`), after migration 0010 (which takes no lock a writer waits for): the
keys' trigger and the old table's range check (NOT VALID), in one transaction that waits at
most the claim's lock wait; the existing rows' keys, in batches; the range check validated (one
scan that blocks no writer); then the switch itself, again one short transaction under the
claim's lock wait. A step that finds the inbox busy is tried again on the
next run; until the last one the inbox works unpartitioned.

Every function commits its own short transactions (``conn.transaction()``, on an autocommit
connection or not): call it outside a transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from psycopg import Connection, Rollback, sql

from webhook_inbox.errors import StoreError
from webhook_inbox.store import outbox
from webhook_inbox.store.inbox import CLAIM_LOCK_WAIT_MS
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import bounded_statement, translated

_statement = SqlFile("partitions").statement

LEGACY = "webhook_events_legacy"
LEGACY_HIGH = 1 << 32  # the old table's ids: its identity sequence never got near 2^32
_MIN_ID = -(1 << 63)
_DAY_NAME = re.compile(r"^webhook_events_p(\d{8})$")
_EPOCH = date(1970, 1, 1)
# Keys forgotten (or filled, before the switch) per statement: narrow rows, a few milliseconds
# per batch.
KEY_BATCH = 5000
# The steps of the switch (advance_switch), in order.
SWITCH_STEPS = ("prepare", "backfill_keys", "validate_range", "switch")
# What advance_switch answers when only the switch itself is left and the release before may
# still run: the release that applied migration 0010 has not been in place for
# RELEASE_SETTLE_HOURS yet (SwitchState.settled).
WAIT_FOR_RELEASE = "wait_for_release"
# Past the deploy that applied 0010: its gradual traffic shift (20 minutes at the longest
# DeploymentType), the rest of the stack's update and a rollback of it, which would bring the
# release before back (its claim fails on the partitioned table).
RELEASE_SETTLE_HOURS = 24


@dataclass(frozen=True)
class Partition:
    """One partition (or a table left detached): its name and its range of ids."""

    name: str
    low: int
    high: int
    attached: bool = True

    @property
    def day(self) -> date | None:
        match = _DAY_NAME.match(self.name)
        return _parse_day(match[1]) if match else None


def day_partition(day: date) -> Partition:
    number = (day - _EPOCH).days
    return Partition(f"webhook_events_p{day:%Y%m%d}", number << 32, (number + 1) << 32)


def _partition_of(name: str, attached: bool) -> Partition:
    if name == LEGACY:
        return Partition(LEGACY, _MIN_ID, LEGACY_HIGH, attached)
    match = _DAY_NAME.match(name)
    if not match:  # cannot happen: the statement selects these names only
        raise StoreError(f"not an inbox partition: {name}")
    day = day_partition(_parse_day(match[1]))
    return Partition(name, day.low, day.high, attached)


def _parse_day(digits: str) -> date:
    return datetime.strptime(digits, "%Y%m%d").replace(tzinfo=UTC).date()


def _ddl(name: str, partition: Partition, **extra: Any) -> sql.Composed:
    return _statement(name).format(
        partition=sql.Identifier(partition.name),
        low=sql.Literal(partition.low),
        high=sql.Literal(partition.high),
        range_check=sql.Identifier(f"{partition.name}_range"),
        **extra,
    )


def _lock_wait(conn: Connection[Any]) -> None:
    conn.execute(_statement("lock_wait"), {"lock_timeout": f"{CLAIM_LOCK_WAIT_MS}ms"})


@translated
def is_partitioned(conn: Connection[Any]) -> bool:
    with conn.transaction():
        row = conn.execute(_statement("is_partitioned")).fetchone()
    return bool(row and row[0])


@dataclass(frozen=True)
class SwitchState:
    partitioned: bool
    keyed: bool  # the keys' trigger is on
    range_checked: bool  # the old table's range check is validated
    backfilling: bool  # existing rows' keys are still to fill
    settled: bool = True  # migration 0010 is RELEASE_SETTLE_HOURS old (or was never applied)

    @property
    def next_step(self) -> str | None:
        if self.partitioned:
            return None
        if not self.keyed:
            return "prepare"
        if self.backfilling:
            return "backfill_keys"
        return "switch" if self.range_checked else "validate_range"


@translated
def switch_state(conn: Connection[Any]) -> SwitchState:
    with conn.transaction():
        row = conn.execute(
            _statement("switch_state"), {"settle_hours": RELEASE_SETTLE_HOURS}
        ).fetchone()
    if row is None:  # cannot happen: webhook_events exists once migrated
        raise StoreError("webhook_events is missing")
    return SwitchState(*(bool(v) for v in row))


@translated
def advance_switch(
    conn: Connection[Any], *, validate_timeout_ms: int = 0, wait_for_release: bool = True
) -> str | None:
    """Take the next step of the switch to the partitioned inbox; its name (``SWITCH_STEPS``),
    None when the inbox already is partitioned. The steps that lock the inbox wait at most the
    claim's lock wait (:class:`~webhook_inbox.errors.StoreLockTimeout` leaves everything as it
    was); the others block no writer. ``validate_timeout_ms`` bounds the one long statement, the
    scan that validates the old table's range (0: no bound). The switch itself waits for the
    release before to be gone for good (:data:`WAIT_FOR_RELEASE`, nothing done) unless
    ``wait_for_release`` is False: the earlier steps are safe while it runs, the switch is not."""
    state = switch_state(conn)
    step = state.next_step
    if step == "switch" and wait_for_release and not state.settled:
        return WAIT_FOR_RELEASE
    if step == "prepare":
        with conn.transaction():
            _lock_wait(conn)
            conn.execute(_statement("prepare_switch"))
            outbox.drop_inbox_reference(conn)
    elif step == "backfill_keys":
        with conn.transaction():
            conn.execute(_statement("backfill_keys"), {"limit": KEY_BATCH})
    elif step == "validate_range":
        with conn.transaction():
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true)", (f"{validate_timeout_ms}ms",)
            )
            with bounded_statement():
                conn.execute(_statement("validate_range"))
    elif step == "switch":
        with conn.transaction():
            _lock_wait(conn)
            conn.execute(_statement("switch_to_partitions"))
            for day in _days_from(datetime.now(UTC).date(), 2):
                conn.execute(_ddl("create_partition", day_partition(day)))
    return step


def switch_to_partitions(conn: Connection[Any]) -> bool:
    """Every step of the switch at once (tests, benchmarks, an operator's shell, who knows that
    no function of a release before migration 0010 runs any more): whether this call made the
    switch (False: the inbox already was partitioned)."""
    switched = False
    while (step := advance_switch(conn, wait_for_release=False)) is not None:
        switched = step == "switch"
    return switched


@translated
def partitions(conn: Connection[Any]) -> list[Partition]:
    """The inbox's partitions, and the tables a retention cut short left detached."""
    with conn.transaction():
        rows = conn.execute(_statement("partitions")).fetchall()
    return [_partition_of(name, attached) for name, attached in rows]


def _days_from(first: date, count: int) -> list[date]:
    return [first + timedelta(days=n) for n in range(count)]


@translated
def create_ahead(conn: Connection[Any], *, days: int, today: date | None = None) -> int:
    """Create the partitions of today and the next ``days`` days that do not exist yet; the
    number created. Reads the catalog only when every one exists."""
    existing = {p.name for p in partitions(conn)}
    created = 0
    for day in _days_from(today or datetime.now(UTC).date(), days + 1):
        partition = day_partition(day)
        if partition.name in existing:
            continue
        with conn.transaction():
            _lock_wait(conn)
            if _attached(conn, partition) is not None:
                continue  # an overlapping sweeper made it
            conn.execute(_ddl("create_partition", partition))
        created += 1
    return created


def _attached(conn: Connection[Any], partition: Partition) -> bool | None:
    """Under the partitions' lock: whether ``partition`` is attached (None: it does not exist)."""
    conn.execute(_statement("lock_partitions"))
    row = conn.execute(_statement("partition_state"), {"name": partition.name}).fetchone()
    return None if row is None else bool(row[0])


@dataclass(frozen=True)
class Blockers:
    unfinished: bool
    recent: bool
    gone: bool = False  # another sweeper detached it first: nothing for this one to do

    def __bool__(self) -> bool:
        return self.unfinished or self.recent or self.gone


@translated
def blockers(conn: Connection[Any], partition: Partition, *, days: int) -> Blockers:
    """What keeps ``partition`` past the key retention of ``days`` days (nothing: falsy)."""
    row = conn.execute(_ddl("partition_blockers", partition), {"days": days}).fetchone()
    if row is None:  # cannot happen: one row of two EXISTS
        raise StoreError("partition_blockers answered no row")
    return Blockers(bool(row[0]), bool(row[1]))


@translated
def detach_if_expired(conn: Connection[Any], partition: Partition, *, days: int) -> Blockers:
    """Detach ``partition`` when every row in it is terminal and older than the key retention,
    judged again under the lock that detaches it (nothing can change a row in between); an outbox
    message or audit row that names one of its events loses the reference. Falsy blockers: it
    was detached. Waits at most the claim's lock wait for the inbox's lock, and holds it for the
    catalog change and two index probes."""
    with conn.transaction():
        # Judged first without the inbox's lock (the partitions' lock only, which no writer
        # waits for): a partition that must stay, the usual answer for the old table's while it
        # holds recent rows, costs two index probes.
        _lock_wait(conn)
        if not _attached(conn, partition):  # an overlapping sweeper detached it
            return Blockers(unfinished=False, recent=False, gone=True)
        found = blockers(conn, partition, days=days)
    if found:
        return found
    with conn.transaction():
        _lock_wait(conn)
        if not _attached(conn, partition):  # an overlapping sweeper detached it
            return Blockers(unfinished=False, recent=False, gone=True)
        conn.execute(_statement("lock_inbox"))
        found = blockers(conn, partition, days=days)
        if found:
            raise Rollback  # nothing changed; the lock goes at once
        conn.execute(_ddl("detach_partition", partition))
        bounds = {"low": partition.low, "high": partition.high}
        conn.execute(_statement("forget_references"), bounds)
        outbox.forget_source_events(conn, **bounds)
    return found


@translated
def forget_keys(conn: Connection[Any], partition: Partition, *, limit: int = KEY_BATCH) -> int:
    """Delete up to ``limit`` keys of ``partition``'s rows; how many went."""
    params = {"low": partition.low, "high": partition.high, "limit": limit}
    with conn.transaction():
        return conn.execute(_statement("forget_keys"), params).rowcount


@translated
def drop_detached(conn: Connection[Any], partition: Partition) -> bool:
    """Drop a detached partition whose keys are all forgotten; False if an overlapping sweeper
    dropped it first (judged under the partitions' lock, as detaching is)."""
    if partition.attached:
        raise StoreError(f"{partition.name} is still attached")
    with conn.transaction():
        _lock_wait(conn)
        state = _attached(conn, partition)
        if state is None:
            return False
        if state:
            raise StoreError(f"{partition.name} is attached again")
        conn.execute(_ddl("drop_partition", partition))
    return True
