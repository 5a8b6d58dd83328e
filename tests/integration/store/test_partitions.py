"""The partitioned inbox: the online switch under live claims, partitions ahead, and retention
that drops a day's partition only when every row in it is finished (real PostgreSQL)."""

from __future__ import annotations

import hashlib
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from webhook_inbox.errors import StoreConflict, StoreLockTimeout, StoreStatementTimeout
from webhook_inbox.store import inbox, partition_switch, partitions
from webhook_inbox.store import migrate as migrate_module
from webhook_inbox.store.inbox import CLAIM_LOCK_WAIT_MS
from webhook_inbox.store.migrate import available_migrations, migrate

ALL = available_migrations()
BEFORE = [m for m in ALL if m.version < "0010"]
DIGEST = hashlib.sha256(b"{}").digest()
# The release before's claim (0001-0009): the statement that keeps running while 0010 is
# applied, until the functions are updated.
OLD_CLAIM = (
    "INSERT INTO webhook_events AS e (provider, event_id, event_type, body_sha256, payload)"
    " VALUES ('stripe', %s, 't', %s, '{}')"
    " ON CONFLICT (provider, event_id) DO UPDATE SET delivery_count = e.delivery_count + 1"
)


def _claim(conn: psycopg.Connection[Any], key: str) -> inbox.ClaimResult:
    return inbox.claim_event(
        conn, provider="stripe", event_id=key, event_type="t", body_sha256=DIGEST, payload={}
    )


class Claimer(threading.Thread):
    """Claims a new key and a duplicate of an earlier one, again and again, timing each."""

    def __init__(self, url: str, prefix: str, old: bool = False) -> None:
        super().__init__()
        self.url, self.prefix, self.old = url, prefix, old
        self.stop = threading.Event()
        self.claimed: list[str] = []
        self.slowest_ms = 0.0
        self.errors: list[Exception] = []

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                key = f"{self.prefix}{len(self.claimed)}"
                for each in (key, self.claimed[-1] if self.claimed else key):
                    started = time.monotonic()
                    try:
                        if self.old:
                            conn.execute(OLD_CLAIM, (each, DIGEST))
                        else:
                            _claim(conn, each)
                    except Exception as exc:  # noqa: BLE001 - asserted empty below
                        self.errors.append(exc)
                        return
                    self.slowest_ms = max(self.slowest_ms, (time.monotonic() - started) * 1000)
                self.claimed.append(key)

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=30)


def _populate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload,"
            " status, processed_at)"
            " SELECT 'stripe', 'evt_' || g, 't', sha256(g::text::bytea), '{}'::jsonb,"
            "  (ARRAY['received','processed','failed','ignored'])[1 + g % 4],"
            "  CASE WHEN g % 4 = 1 THEN now() END"
            " FROM generate_series(1, 5000) AS g"
        )


def test_the_switch_loses_nothing_and_makes_no_claim_wait_past_its_lock_wait(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = empty_database_url
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: BEFORE)
    with psycopg.connect(url) as conn:
        migrate(conn)
    _populate(url)
    # 0010 while the release before claims.
    old = Claimer(url, "old_", old=True)
    old.start()
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: ALL)
    with psycopg.connect(url) as conn:
        assert migrate(conn) == [m.version for m in ALL if m.version >= "0010"]
    # The release before goes on claiming after the migration, past the first step of the
    # switch (its rows from then on get their keys by trigger, the ones before by backfill).
    claimed_before = len(old.claimed)
    while len(old.claimed) < claimed_before + 20:
        time.sleep(0.01)
    with psycopg.connect(url, autocommit=True) as conn:
        assert partition_switch.advance_switch(conn) == "prepare"
    claimed_before = len(old.claimed)
    while len(old.claimed) < claimed_before + 20:
        time.sleep(0.01)
    old.finish()
    # The switch while this release claims.
    new = Claimer(url, "new_")
    new.start()
    while len(new.claimed) < 20:
        time.sleep(0.01)
    with psycopg.connect(url, autocommit=True) as conn:
        assert partition_switch.switch_to_partitions(conn)
        assert not partition_switch.switch_to_partitions(conn)  # once
    claimed_before = len(new.claimed)
    while len(new.claimed) < claimed_before + 20:  # claims go on after the switch
        assert not new.errors, new.errors
        time.sleep(0.01)
    new.finish()

    assert not old.errors, old.errors
    assert not new.errors, new.errors
    # The claim's wait for the switch: at most the switch's own wait for the table (the claim's
    # lock wait) plus the catalog changes it holds the lock for.
    assert new.slowest_ms < CLAIM_LOCK_WAIT_MS + 250, new.slowest_ms
    with psycopg.connect(url, autocommit=True) as conn:
        kind = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'webhook_events'::regclass")
        assert kind.fetchone() == ("p",)
        rows = dict(
            conn.execute(
                "SELECT event_id, count(*) FROM webhook_events GROUP BY event_id"
            ).fetchall()
        )
        expected = {f"evt_{g}" for g in range(1, 5001)} | set(old.claimed) | set(new.claimed)
        assert set(rows) == expected  # nothing lost
        assert set(rows.values()) == {1}  # nothing stored twice
        orphans = conn.execute(
            "SELECT count(*) FROM webhook_event_keys k"
            " WHERE NOT EXISTS (SELECT FROM webhook_events e WHERE e.id = k.event_row_id)"
        ).fetchone()
        keys = conn.execute("SELECT count(*) FROM webhook_event_keys").fetchone()
        assert orphans == (0,)
        assert keys == (len(expected),)
        # Every duplicate was counted on its one row.
        counts = conn.execute(
            "SELECT sum(delivery_count) FROM webhook_events WHERE event_id ~ '^(old|new)_'"
        ).fetchone()
        assert counts == (2 * (len(old.claimed) + len(new.claimed)),)


def test_the_switch_waits_a_day_after_the_migration_for_the_release_before_to_be_gone(
    empty_database_url: str,
) -> None:
    """The release before's claim runs through a gradual deploy of this one (and again after a
    rollback of it), and it cannot run against the partitioned table: the sweeper's switch waits
    until migration 0010 has been in place for RELEASE_SETTLE_HOURS; the steps before it do not."""
    url = empty_database_url
    _unpartitioned(url, upto="switch")
    with psycopg.connect(url, autocommit=True) as conn:
        assert partition_switch.advance_switch(conn) == partition_switch.WAIT_FOR_RELEASE
        assert partition_switch.switch_state(conn).next_step == "switch"  # nothing done
        conn.execute(OLD_CLAIM, ("evt_1", DIGEST))  # the release before still claims
        _age_migration(conn, hours=partition_switch.RELEASE_SETTLE_HOURS - 1)
        assert partition_switch.advance_switch(conn) == partition_switch.WAIT_FOR_RELEASE
        _age_migration(conn, hours=partition_switch.RELEASE_SETTLE_HOURS)
        assert partition_switch.advance_switch(conn) == "switch"
        # Why it waited: the release before's claim on the partitioned table fails (its ingest
        # answers an error and the sender retries; after a day nothing of it runs any more).
        with pytest.raises(psycopg.errors.InvalidColumnReference):
            conn.execute(OLD_CLAIM, ("evt_2", DIGEST))
        assert not _claim(conn, "evt_1").is_new  # its rows are kept, found by their keys


def _age_migration(conn: psycopg.Connection[Any], *, hours: int) -> None:
    """Migration 0010 as if applied ``hours`` ago."""
    conn.execute(
        "UPDATE schema_migrations SET applied_at = now() - make_interval(hours => %s)"
        " WHERE version = '0010'",
        (hours,),
    )


def _unpartitioned(url: str, *, upto: str | None = None) -> None:
    """Every migration applied (the inbox not switched yet), populated; then the switch's steps
    up to, not including, ``upto``."""
    with psycopg.connect(url) as conn:
        migrate(conn)
    _populate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        while upto and partition_switch.switch_state(conn).next_step != upto:
            partition_switch.advance_switch(conn)


def test_a_busy_inbox_leaves_the_switch_as_it_was_after_the_claims_lock_wait(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    _unpartitioned(url)
    for step in ("prepare", "switch"):
        _unpartitioned_upto(url, step)
        with psycopg.connect(url) as writer, psycopg.connect(url, autocommit=True) as conn:
            _claim(writer, f"held_{step}")  # an open transaction holding the inbox
            started = time.monotonic()
            with pytest.raises(StoreLockTimeout):
                partition_switch.advance_switch(conn, wait_for_release=False)
            waited_ms = (time.monotonic() - started) * 1000
            writer.rollback()
            assert partition_switch.switch_state(conn).next_step == step  # nothing changed
        assert CLAIM_LOCK_WAIT_MS <= waited_ms < CLAIM_LOCK_WAIT_MS + 2000


def _unpartitioned_upto(url: str, step: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        while partition_switch.switch_state(conn).next_step != step:
            partition_switch.advance_switch(conn)


def test_the_keys_of_existing_rows_are_filled_before_the_switch(empty_database_url: str) -> None:
    url = empty_database_url
    _unpartitioned(url)
    with psycopg.connect(url, autocommit=True) as conn:
        # More rows without keys (the release before, claiming after the migration).
        conn.execute(
            "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload)"
            " SELECT 'stripe', 'late_' || g, 't', sha256(g::text::bytea), '{}'"
            " FROM generate_series(1, 12000) AS g"
        )
        assert partition_switch.advance_switch(conn) == "prepare"
        steps = []
        while (step := partition_switch.advance_switch(conn, wait_for_release=False)) is not None:
            steps.append(step)
        # From the first row on: 17,000 rows, four batches of at most 5,000; then the scan and
        # the switch.
        assert steps == ["backfill_keys"] * 4 + ["validate_range", "switch"]
        missing = conn.execute(
            "SELECT count(*) FROM webhook_events e WHERE NOT EXISTS (SELECT FROM"
            " webhook_event_keys k WHERE k.provider = e.provider AND k.event_id = e.event_id"
            " AND k.event_row_id = e.id)"
        ).fetchone()
        assert missing == (0,)
        assert _claim(conn, "late_7").is_new is False  # a duplicate, found by its key


def test_a_row_stored_before_its_key_is_filled_is_a_duplicate_and_found(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    _unpartitioned(url)  # 5,000 rows, no key filled yet
    with psycopg.connect(url, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT id, delivery_count FROM webhook_events WHERE event_id = 'evt_42'"
        ).fetchone()
        assert stored is not None
        again = _claim(conn, "evt_42")
        assert (again.is_new, again.id, again.delivery_count) == (False, stored[0], stored[1] + 1)
        assert inbox.get_event(conn, "stripe", "evt_43") is not None  # no key yet, found
        keys = conn.execute("SELECT event_row_id FROM webhook_event_keys").fetchall()
        assert keys == [(stored[0],)]  # the claim filled its key with the stored row's id
        # And after the switch, its row in the old table's partition, the same.
        partition_switch.switch_to_partitions(conn)
        assert _claim(conn, "evt_44").is_new is False
        assert _claim(conn, "evt_new").is_new is True


def test_a_range_check_scan_cut_short_is_started_over_next_time(empty_database_url: str) -> None:
    url = empty_database_url
    _unpartitioned(url)
    _unpartitioned_upto(url, "validate_range")
    with psycopg.connect(url) as other, psycopg.connect(url, autocommit=True) as conn:
        # A lock the scan's SHARE UPDATE EXCLUSIVE waits for (a writer's would not: it is a
        # statement timeout this exercises, as a table too large for one run's time would).
        other.execute("LOCK TABLE webhook_events IN SHARE UPDATE EXCLUSIVE MODE")
        with pytest.raises(StoreStatementTimeout):
            partition_switch.advance_switch(conn, validate_timeout_ms=200)
        other.rollback()
        assert partition_switch.switch_state(conn).next_step == "validate_range"
        assert partition_switch.advance_switch(conn) == "validate_range"
        assert partition_switch.advance_switch(conn, wait_for_release=False) == "switch"


def test_partitions_ahead_are_created_once_and_claims_land_in_todays(
    conn: psycopg.Connection[Any],
) -> None:
    today = datetime.now(UTC).date()
    partitions.create_ahead(conn, days=7)
    assert partitions.create_ahead(conn, days=7) == 0
    names = {p.name for p in partitions.partitions(conn)}
    assert {partitions.day_partition(today + timedelta(days=n)).name for n in range(8)} <= names
    claim = _claim(conn, "evt_today")
    assert claim.id >> 32 == (today - datetime(1970, 1, 1, tzinfo=UTC).date()).days


def _old_day(conn: psycopg.Connection[Any], days_ago: int, statuses: list[str]) -> Any:
    day = datetime.now(UTC).date() - timedelta(days=days_ago)
    partitions.create_ahead(conn, days=0, today=day)
    partition = partitions.day_partition(day)
    at = datetime.now(UTC) - timedelta(days=days_ago)
    for n, status in enumerate(statuses):
        conn.execute(
            "INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256,"
            " payload, status, received_at, updated_at)"
            " VALUES (%s, 'stripe', %s, 't', %s, '{}', %s, %s, %s)",
            (partition.low + n + 1, f"evt_{days_ago}_{n}", DIGEST, status, at, at),
        )
    return partition


def test_a_days_partition_past_the_retention_is_not_due_at_every_run(
    conn: psycopg.Connection[Any],
) -> None:
    """A day's partition whose rows are past the key retention but which must stay (a held
    event, a recent replay) would make every run due if its rows' ages counted: an idle stack's
    database would never be left to pause. It goes on the run a day that connects regardless;
    only the rows stored before the switch, deleted row by row, are counted."""
    from webhook_inbox.store import inbox_upkeep

    _old_day(conn, 100, ["processed", "dead_letter", "received"])  # kept: one unfinished
    _old_day(conn, 95, ["processed", "ignored"])  # past the retention, whole
    conn.execute("UPDATE webhook_events SET available_at = '9999-01-01' WHERE status = 'received'")

    def due() -> float | None:  # payloads kept a year: the key retention's moment alone
        return inbox_upkeep.next_due(conn, stale_seconds=300, payload_days=365, key_days=90)

    first = due()
    assert first is not None
    assert first > datetime.now(UTC).timestamp()  # the payloads' purge, a year on
    # A row stored before the switch, past the retention: due since its retention ran out.
    at = datetime.now(UTC) - timedelta(days=91)
    conn.execute(
        "INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256, payload,"
        " status, received_at, updated_at) VALUES (7, 'stripe', 'evt_legacy', 't', %s, '{}',"
        " 'processed', %s, %s)",
        (DIGEST, at, at),
    )
    assert due() == pytest.approx((at + timedelta(days=90)).timestamp(), abs=1e-3)


def test_retention_drops_a_finished_days_partition_and_keeps_an_unfinished_one(
    conn: psycopg.Connection[Any],
) -> None:
    finished = _old_day(conn, 100, ["processed", "ignored", "dead_letter"])
    unfinished = _old_day(conn, 99, ["processed", "failed"])
    conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload, source_event_id)"
        " VALUES ('t', 'k1', '{}', %s)",
        (finished.low + 1,),
    )

    kept = partitions.detach_if_expired(conn, unfinished, days=90)
    assert kept.unfinished
    assert not kept.recent
    assert partitions.detach_if_expired(conn, finished, days=90).unfinished is False
    state = {p.name: p.attached for p in partitions.partitions(conn)}
    assert state[unfinished.name] is True
    assert state[finished.name] is False
    # The outbox message stays, without its reference (what ON DELETE SET NULL did).
    source = conn.execute(
        "SELECT source_event_id FROM outbox_messages WHERE deduplication_key = 'k1'"
    )
    assert source.fetchone() == (None,)
    # Detached, its keys not yet forgotten: a redelivery is told to come back (503).
    with pytest.raises(StoreConflict):
        _claim(conn, "evt_100_0")

    detached = partitions.Partition(finished.name, finished.low, finished.high, attached=False)
    assert partitions.forget_keys(conn, detached, limit=2) == 2
    assert partitions.forget_keys(conn, detached, limit=2) == 1
    assert partitions.drop_detached(conn, detached) is True
    assert finished.name not in {p.name for p in partitions.partitions(conn)}
    # An overlapping sweeper that found the same detached partition: nothing left to drop.
    assert partitions.drop_detached(conn, detached) is False
    # Forgotten: a redelivery now is a new event, as after any key retention.
    assert _claim(conn, "evt_100_0").is_new
    # The unfinished day's rows are all still there, and so are their keys.
    assert not _claim(conn, "evt_99_1").is_new


def test_a_partition_with_a_recently_replayed_row_stays(conn: psycopg.Connection[Any]) -> None:
    partition = _old_day(conn, 100, ["processed", "processed"])
    conn.execute("UPDATE webhook_events SET updated_at = now() WHERE id = %s", (partition.low + 2,))
    found = partitions.detach_if_expired(conn, partition, days=90)
    assert found.recent
    assert not found.unfinished
    assert partition.name in {p.name for p in partitions.partitions(conn) if p.attached}


def test_a_direct_insert_of_a_stored_key_is_refused(conn: psycopg.Connection[Any]) -> None:
    """The keys table holds for every writer, not only the claim (the trigger)."""
    _claim(conn, "evt_once")
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "INSERT INTO webhook_events (provider, event_id, event_type, body_sha256, payload)"
            " VALUES ('stripe', 'evt_once', 't', %s, '{}')",
            (DIGEST,),
        )


def test_a_duplicate_of_a_row_older_than_the_last_few_days_is_counted_and_woken(
    conn: psycopg.Connection[Any],
) -> None:
    """The claim counts recent duplicates itself; an older row's duplicate is counted by its
    second statement, with the same answer: counted, and a waiting row re-stamped (rewake)."""
    day = datetime.now(UTC).date() - timedelta(days=inbox.RECENT_DAYS_BACK + 7)
    partitions.create_ahead(conn, days=0, today=day)
    old_id = partitions.day_partition(day).low + 1
    conn.execute(
        "INSERT INTO webhook_events (id, provider, event_id, event_type, body_sha256, payload,"
        " received_at) OVERRIDING SYSTEM VALUE VALUES (%s, 'stripe', 'evt_old', 't', %s, '{}',"
        " now() - interval '10 days')",
        (old_id, DIGEST),
    )
    fresh = _claim(conn, "evt_fresh")

    [old_again] = inbox.claim_events(
        conn,
        provider="stripe",
        events=[inbox.NewEvent("evt_old", "t", {})],
        body_sha256=DIGEST,
        enqueuing=True,
    )
    fresh_again = _claim(conn, "evt_fresh")

    assert (old_again.id, old_again.is_new, old_again.counted) == (old_id, False, True)
    assert (old_again.delivery_count, old_again.status, old_again.rewake) == (2, "received", True)
    assert (fresh_again.id, fresh_again.is_new, fresh_again.delivery_count) == (fresh.id, False, 2)
    stamped = conn.execute(
        "SELECT enqueued_at IS NOT NULL FROM webhook_events WHERE id = %s", (old_id,)
    ).fetchone()
    assert stamped == (True,)
