"""Data layer for the partitions of the inbox and the outbox: which tables are partitioned and
how (:class:`PartitionedTable`, :data:`INBOX`, :data:`OUTBOX`), partitions created ahead, and
retention that drops whole partitions. The switch from an unpartitioned table is
:mod:`.partition_switch`. SQL in ``sql/partitions.sql`` (what both tables share, and the inbox's
own) and ``sql/outbox_partitions.sql`` (the outbox's own).

``webhook_events`` and ``outbox_messages`` are partitioned by range of id, one partition per UTC
day: an id is ``day << 32 | sequence``, so it names its partition (docs/design.md, "Partitions
and retention"). The table as it was before its switch (``<table>_legacy``) holds the ids below
2^32.

Every function commits its own short transactions (``conn.transaction()``, on an autocommit
connection or not): call it outside a transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from psycopg import Connection, Rollback, sql

from webhook_inbox.errors import StoreError
from webhook_inbox.store import outbox
from webhook_inbox.store.inbox import CLAIM_LOCK_WAIT_MS
from webhook_inbox.store.queries import SqlFile
from webhook_inbox.store.store_errors import translated

_shared = SqlFile("partitions").statement

LEGACY_HIGH = 1 << 32  # the old tables' ids: their identity sequences never got near 2^32
_MIN_ID = -(1 << 63)
_EPOCH = date(1970, 1, 1)
# Keys forgotten (or filled, before the switch) per statement: narrow rows, a few milliseconds
# per batch.
KEY_BATCH = 5000


@dataclass(frozen=True)
class PartitionedTable:
    """A table partitioned by day, and where its own statements are (its switch, what keeps one
    of its partitions, its keys, the references to its rows)."""

    name: str
    noun: str  # how the sweeper's notes name it
    statements: SqlFile
    # The migration that made the table ready for its switch: the switch itself waits until it
    # has been applied for a day (partition_switch.RELEASE_SETTLE_HOURS).
    migration: str
    # Run in the switch's first transaction, after prepare_switch (the inbox's: the outbox's
    # foreign key to it goes too).
    after_prepare: Callable[[Connection[Any]], None] | None = field(default=None, compare=False)
    # Run in the transaction that detaches a partition, with its bounds (the inbox's: the
    # outbox's references to its rows are cleared).
    after_detach: Callable[..., None] | None = field(default=None, compare=False)
    # A table whose switch must be made first (the outbox's: the inbox's switch drops the
    # outbox's foreign key to it, which a partitioned outbox could not keep).
    switched_after: str | None = None

    @property
    def legacy(self) -> str:
        return f"{self.name}_legacy"

    @property
    def pattern(self) -> str:
        return f"^{self.name}_(p[0-9]{{8}}|legacy)$"

    def statement(self, name: str) -> sql.SQL:
        return self.statements.statement(name)


INBOX = PartitionedTable(
    "webhook_events",
    "inbox",
    SqlFile("partitions"),
    "0010",
    after_prepare=outbox.drop_inbox_reference,
    after_detach=outbox.forget_source_events,
)
OUTBOX = PartitionedTable(
    "outbox_messages", "outbox", SqlFile("outbox_partitions"), "0013", switched_after=INBOX.name
)
# In the order of their switches.
TABLES = (INBOX, OUTBOX)


@dataclass(frozen=True)
class Partition:
    """One partition (or a table left detached) of ``table``: its name and its range of ids."""

    name: str
    low: int
    high: int
    attached: bool = True
    table: PartitionedTable = INBOX

    @property
    def day(self) -> date | None:
        match = re.match(rf"^{re.escape(self.table.name)}_p(\d{{8}})$", self.name)
        return _parse_day(match[1]) if match else None


def day_partition(day: date, table: PartitionedTable = INBOX) -> Partition:
    number = (day - _EPOCH).days
    name = f"{table.name}_p{day:%Y%m%d}"
    return Partition(name, number << 32, (number + 1) << 32, table=table)


def _partition_of(table: PartitionedTable, name: str, attached: bool) -> Partition:
    if name == table.legacy:
        return Partition(name, _MIN_ID, LEGACY_HIGH, attached, table)
    found = Partition(name, 0, 0, attached, table).day
    if found is None:  # cannot happen: the statement selects these names only
        raise StoreError(f"not a partition of {table.name}: {name}")
    day = day_partition(found, table)
    return Partition(name, day.low, day.high, attached, table)


def _parse_day(digits: str) -> date:
    return datetime.strptime(digits, "%Y%m%d").replace(tzinfo=UTC).date()


def shared(name: str, table: PartitionedTable, **extra: Any) -> sql.Composed:
    """A statement of partitions.sql that both tables share, written for ``table``."""
    return _shared(name).format(
        table=sql.Identifier(table.name),
        table_name=sql.Literal(table.name),
        legacy_range=sql.Identifier(f"{table.legacy}_range"),
        **extra,
    )


def _ddl(name: str, partition: Partition, *, own: bool = False) -> sql.Composed:
    fields = {
        "partition": sql.Identifier(partition.name),
        "low": sql.Literal(partition.low),
        "high": sql.Literal(partition.high),
        "range_check": sql.Identifier(f"{partition.name}_range"),
    }
    if own:  # the table's own statement (its file), which names its table itself
        return partition.table.statement(name).format(**fields)
    return shared(name, partition.table, **fields)


def lock_wait(conn: Connection[Any]) -> None:
    """This transaction's next lock waits at most the claim's lock wait."""
    conn.execute(_shared("lock_wait"), {"lock_timeout": f"{CLAIM_LOCK_WAIT_MS}ms"})


@translated
def is_partitioned(conn: Connection[Any], table: PartitionedTable = INBOX) -> bool:
    with conn.transaction():
        row = conn.execute(shared("is_partitioned", table)).fetchone()
    return bool(row and row[0])


@translated
def partitions(conn: Connection[Any], table: PartitionedTable = INBOX) -> list[Partition]:
    """The table's partitions, and the tables a retention cut short left detached."""
    with conn.transaction():
        rows = conn.execute(shared("partitions", table, pattern=sql.Literal(table.pattern)))
        found = rows.fetchall()
    return [_partition_of(table, name, attached) for name, attached in found]


def days_from(first: date, count: int) -> list[date]:
    return [first + timedelta(days=n) for n in range(count)]


def create_partition(conn: Connection[Any], partition: Partition) -> None:
    """In the caller's transaction (the switch's, or :func:`create_ahead`'s)."""
    conn.execute(_ddl("create_partition", partition))


@translated
def create_ahead(
    conn: Connection[Any], *, days: int, today: date | None = None, table: PartitionedTable = INBOX
) -> int:
    """Create the partitions of today and the next ``days`` days that do not exist yet; the
    number created. Reads the catalog only when every one exists."""
    existing = {p.name for p in partitions(conn, table)}
    created = 0
    for day in days_from(today or datetime.now(UTC).date(), days + 1):
        partition = day_partition(day, table)
        if partition.name in existing:
            continue
        with conn.transaction():
            lock_wait(conn)
            if _attached(conn, partition) is not None:
                continue  # an overlapping sweeper made it
            create_partition(conn, partition)
        created += 1
    return created


def _attached(conn: Connection[Any], partition: Partition) -> bool | None:
    """Under the partitions' lock: whether ``partition`` is attached (None: it does not exist)."""
    conn.execute(shared("lock_partitions", partition.table))
    row = conn.execute(_shared("partition_state"), {"name": partition.name}).fetchone()
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
    row = conn.execute(_ddl("partition_blockers", partition, own=True), {"days": days}).fetchone()
    if row is None:  # cannot happen: one row of two EXISTS
        raise StoreError("partition_blockers answered no row")
    return Blockers(bool(row[0]), bool(row[1]))


@translated
def detach_if_expired(conn: Connection[Any], partition: Partition, *, days: int) -> Blockers:
    """Detach ``partition`` when every row in it is finished and older than the key retention
    (the table's ``partition_blockers``), judged again under the lock that detaches it (nothing
    can change a row in between); an audit row (or, for the inbox, an outbox message) that
    names one of its rows loses the reference. Falsy blockers: it was detached. Waits at most
    the claim's lock wait for the table's lock, and holds it for the catalog change and two
    index probes."""
    table = partition.table
    with conn.transaction():
        # Judged first without the table's lock (the partitions' lock only, which no writer
        # waits for): a partition that must stay, the usual answer for the old table's while it
        # holds recent rows, costs two index probes.
        lock_wait(conn)
        if not _attached(conn, partition):  # an overlapping sweeper detached it
            return Blockers(unfinished=False, recent=False, gone=True)
        found = blockers(conn, partition, days=days)
    if found:
        return found
    with conn.transaction():
        lock_wait(conn)
        if not _attached(conn, partition):  # an overlapping sweeper detached it
            return Blockers(unfinished=False, recent=False, gone=True)
        conn.execute(shared("lock_table", table))
        found = blockers(conn, partition, days=days)
        if found:
            raise Rollback  # nothing changed; the lock goes at once
        conn.execute(_ddl("detach_partition", partition))
        bounds = {"low": partition.low, "high": partition.high}
        conn.execute(table.statement("forget_references"), bounds)
        if table.after_detach is not None:
            table.after_detach(conn, **bounds)
    return found


@translated
def forget_keys(conn: Connection[Any], partition: Partition, *, limit: int = KEY_BATCH) -> int:
    """Delete up to ``limit`` keys of ``partition``'s rows; how many went."""
    params = {"low": partition.low, "high": partition.high, "limit": limit}
    with conn.transaction():
        return conn.execute(partition.table.statement("forget_keys"), params).rowcount


@translated
def drop_detached(conn: Connection[Any], partition: Partition) -> bool:
    """Drop a detached partition whose keys are all forgotten; False if an overlapping sweeper
    dropped it first (judged under the partitions' lock, as detaching is)."""
    if partition.attached:
        raise StoreError(f"{partition.name} is still attached")
    with conn.transaction():
        lock_wait(conn)
        state = _attached(conn, partition)
        if state is None:
            return False
        if state:
            raise StoreError(f"{partition.name} is attached again")
        conn.execute(_ddl("drop_partition", partition))
    return True
