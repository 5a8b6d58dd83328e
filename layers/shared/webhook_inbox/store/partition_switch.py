"""Data layer for the switch of a table (the inbox, then the outbox) from unpartitioned to
partitioned by day, made by the sweeper in steps (:func:`advance_switch`). SQL: each table's
own statements (``sql/partitions.sql`` for the inbox, ``sql/outbox_partitions.sql`` for the
outbox) and the range check's validation, which they share.

After the table's migration (0010 for the inbox, 0013 for the outbox: no lock a writer waits
for), the steps are: the keys' trigger and the old table's range check (NOT VALID), in one
transaction that waits at most the claim's lock wait; the existing rows' keys, in batches; the
range check validated (one scan that blocks no writer); then the switch itself, again one short
transaction under the claim's lock wait. A step that finds the table busy is tried again on the
next run; until the last one the table works unpartitioned. The outbox's switch starts once the
inbox's is made (:attr:`~.partitions.PartitionedTable.switched_after`).

Every function commits its own short transactions: call it outside a transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg import Connection

from webhook_inbox.errors import StoreError
from webhook_inbox.store import partitions
from webhook_inbox.store.partitions import INBOX, TABLES, PartitionedTable
from webhook_inbox.store.store_errors import bounded_statement, translated

# The steps of the switch (advance_switch), in order.
SWITCH_STEPS = ("prepare", "backfill_keys", "validate_range", "switch")
# What advance_switch answers, nothing done, when only the switch itself is left and the
# release before may still run: the table's migration has not been applied for
# RELEASE_SETTLE_HOURS yet (SwitchState.settled).
WAIT_FOR_RELEASE = "wait_for_release"
# Past the deploy that applied the migration: its gradual traffic shift (20 minutes at the
# longest DeploymentType), the rest of the stack's update and a rollback of it, which would bring
# the release before back. Its claim and its add_message fail on a partitioned table; the steps
# before the switch are safe while it runs.
RELEASE_SETTLE_HOURS = 24


@dataclass(frozen=True)
class SwitchState:
    partitioned: bool
    keyed: bool  # the keys' trigger is on
    range_checked: bool  # the old table's range check is validated
    backfilling: bool  # existing rows' keys are still to fill
    settled: bool = True  # the table's migration is RELEASE_SETTLE_HOURS old (or not applied)

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
def switch_state(conn: Connection[Any], table: PartitionedTable = INBOX) -> SwitchState:
    with conn.transaction():
        params = {"settle_hours": RELEASE_SETTLE_HOURS, "migration": table.migration}
        row = conn.execute(table.statement("switch_state"), params).fetchone()
    if row is None:  # cannot happen: the table exists once migrated
        raise StoreError(f"{table.name} is missing")
    return SwitchState(*(bool(v) for v in row))


@translated
def advance_switch(
    conn: Connection[Any],
    table: PartitionedTable = INBOX,
    *,
    validate_timeout_ms: int = 0,
    wait_for_release: bool = True,
) -> str | None:
    """Take the next step of ``table``'s switch to partitions; its name (``SWITCH_STEPS``), None
    when the table already is partitioned. The steps that lock the table wait at most the
    claim's lock wait (:class:`~webhook_inbox.errors.StoreLockTimeout` leaves everything as it
    was); the others block no writer. ``validate_timeout_ms`` bounds the one long statement, the
    scan that validates the old table's range (0: no bound). The switch itself waits for the
    release before to be gone for good (:data:`WAIT_FOR_RELEASE`, nothing done) unless
    ``wait_for_release`` is False."""
    state = switch_state(conn, table)
    step = state.next_step
    if step == "switch" and wait_for_release and not state.settled:
        return WAIT_FOR_RELEASE
    if step is not None and table.switched_after is not None:
        first = next(t for t in TABLES if t.name == table.switched_after)
        if not partitions.is_partitioned(conn, first):
            raise StoreError(f"{table.name} is switched after {first.name}, which is not yet")
    if step == "prepare":
        with conn.transaction():
            partitions.lock_wait(conn)
            conn.execute(table.statement("prepare_switch"))
            if table.after_prepare is not None:
                table.after_prepare(conn)
    elif step == "backfill_keys":
        with conn.transaction():
            conn.execute(table.statement("backfill_keys"), {"limit": partitions.KEY_BATCH})
    elif step == "validate_range":
        with conn.transaction():
            conn.execute(
                partitions.shared("scan_timeout", table), {"timeout": f"{validate_timeout_ms}ms"}
            )
            with bounded_statement():
                conn.execute(partitions.shared("validate_range", table))
    elif step == "switch":
        with conn.transaction():
            partitions.lock_wait(conn)
            conn.execute(table.statement("switch_to_partitions"))
            for day in partitions.days_from(datetime.now(UTC).date(), 2):
                partitions.create_partition(conn, partitions.day_partition(day, table))
    return step


def switch_to_partitions(conn: Connection[Any], table: PartitionedTable = INBOX) -> bool:
    """Every step of ``table``'s switch at once (tests, benchmarks, an operator's shell, who
    knows that no function of a release before its migration runs any more): whether this call
    made the switch (False: the table already was partitioned)."""
    switched = False
    while (step := advance_switch(conn, table, wait_for_release=False)) is not None:
        switched = step == "switch"
    return switched
