"""The partitioned outbox: the online switch with messages in flight and a writer adding more,
deduplication across it, and retention that drops a day's partition only when every message in
it is published (real PostgreSQL)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.outbox_days import old_outbox_day
from webhook_inbox.errors import StoreError, StoreLockTimeout
from webhook_inbox.store import migrate as migrate_module
from webhook_inbox.store import outbox, partition_switch, partitions
from webhook_inbox.store.inbox import CLAIM_LOCK_WAIT_MS
from webhook_inbox.store.migrate import available_migrations, migrate
from webhook_inbox.store.partitions import INBOX, OUTBOX

ALL = available_migrations()
BEFORE = [m for m in ALL if m.version < "0012"]
# The release before's add_message (0001-0011): what keeps running while 0012 and 0013 are
# applied, until the functions are updated.
OLD_ADD = (
    "INSERT INTO outbox_messages (topic, deduplication_key, payload) VALUES ('t', %s, '{}')"
    " ON CONFLICT (deduplication_key) DO NOTHING"
)
FLIGHT = ("pending", "leased", "dead", "published")


def _add(conn: psycopg.Connection[Any], key: str) -> bool:
    return outbox.add_message(
        conn, topic="t", deduplication_key=key, payload={"k": key}, source_event_id=None
    )


class Writer(threading.Thread):
    """Adds a new key and a duplicate of an earlier one, in one transaction each time (as the
    processor does), again and again, timing each transaction."""

    def __init__(self, url: str, prefix: str, old: bool = False) -> None:
        super().__init__()
        self.url, self.prefix, self.old = url, prefix, old
        self.stop = threading.Event()
        self.added: list[str] = []
        self.slowest_ms = 0.0
        self.errors: list[Exception] = []

    def run(self) -> None:
        with psycopg.connect(self.url) as conn:
            while not self.stop.is_set():
                key = f"{self.prefix}{len(self.added)}"
                started = time.monotonic()
                try:
                    with conn.transaction():
                        for each in (key, self.added[-1] if self.added else key):
                            if self.old:
                                conn.execute(OLD_ADD, (each,))
                            else:
                                _add(conn, each)
                except Exception as exc:  # noqa: BLE001 - asserted empty below
                    self.errors.append(exc)
                    return
                conn.commit()
                self.slowest_ms = max(self.slowest_ms, (time.monotonic() - started) * 1000)
                self.added.append(key)

    def until(self, more: int) -> None:
        target = len(self.added) + more
        while len(self.added) < target:
            assert not self.errors, self.errors
            assert self.is_alive()
            time.sleep(0.01)

    def finish(self) -> None:
        self.stop.set()
        self.join(timeout=30)


def _in_flight(url: str) -> None:
    """Messages in every state the switch may find: pending, leased (a sweeper publishing
    them), dead, published; 1,000 each."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox_messages (topic, deduplication_key, payload, status, attempts,"
            " lease_expires_at, published_at)"
            " SELECT 't', 'flight_' || g, '{}'::jsonb,"
            "  (ARRAY['pending','pending','dead','published'])[1 + g % 4], g % 4,"
            "  CASE WHEN g % 4 = 1 THEN now() + interval '1 minute' END,"
            "  CASE WHEN g % 4 = 3 THEN now() END"
            " FROM generate_series(0, 3999) AS g"
        )


def _state(conn: psycopg.Connection[Any]) -> dict[str, tuple[str, int, bool]]:
    rows = conn.execute(
        "SELECT deduplication_key, status, attempts, lease_expires_at IS NOT NULL"
        " FROM outbox_messages"
    ).fetchall()
    return {key: (status, attempts, leased) for key, status, attempts, leased in rows}


def test_the_switch_loses_no_message_in_flight_and_makes_no_writer_wait_past_its_lock_wait(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = empty_database_url
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: BEFORE)
    with psycopg.connect(url) as conn:
        migrate(conn)
    _in_flight(url)
    with psycopg.connect(url, autocommit=True) as conn:
        # The release before partitioned its inbox already (and the outbox's switch waits for
        # the inbox's, which drops the outbox's foreign key to it).
        assert partition_switch.switch_to_partitions(conn, INBOX)
        before = _state(conn)
    # 0012 and 0013 while the release before writes messages.
    old = Writer(url, "old_", old=True)
    old.start()
    old.until(5)
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: ALL)
    with psycopg.connect(url) as conn:
        assert migrate(conn) == [m.version for m in ALL if m.version >= "0012"]
    old.until(20)
    with psycopg.connect(url, autocommit=True) as conn:
        assert partition_switch.advance_switch(conn, OUTBOX) == "prepare"
    old.until(20)  # its messages from now on get their keys by trigger
    old.finish()
    new = Writer(url, "new_")
    new.start()
    new.until(20)
    with psycopg.connect(url, autocommit=True) as conn:
        assert partition_switch.switch_to_partitions(conn, OUTBOX)
        assert not partition_switch.switch_to_partitions(conn, OUTBOX)  # once
    new.until(20)  # messages go on after the switch
    new.finish()

    assert not old.errors, old.errors
    assert not new.errors, new.errors
    # A writer's wait for the switch: at most the switch's own wait for the table (the claim's
    # lock wait) plus the catalog changes it holds the lock for.
    assert new.slowest_ms < CLAIM_LOCK_WAIT_MS + 250, new.slowest_ms
    with psycopg.connect(url, autocommit=True) as conn:
        assert partitions.is_partitioned(conn, OUTBOX)
        after = _state(conn)
        written = dict.fromkeys(old.added + new.added, ("pending", 0, False))
        assert after == before | written  # nothing lost, nothing changed, nothing twice
        count = conn.execute("SELECT count(*) FROM outbox_messages").fetchone()
        assert count == (len(after),)
        # Every message has its key, pointing at it, and no key points nowhere.
        keyed = conn.execute(
            "SELECT count(*) FROM outbox_messages m JOIN outbox_message_keys k"
            " ON k.deduplication_key = m.deduplication_key AND k.message_id = m.id"
        ).fetchone()
        keys = conn.execute("SELECT count(*) FROM outbox_message_keys").fetchone()
        assert keyed == keys == (len(after),)
        # The old table's messages are in its partition, the new ones in today's.
        today = partitions.day_partition(datetime.now(UTC).date(), OUTBOX)
        where = dict(
            conn.execute(
                "SELECT tableoid::regclass::text, count(*) FROM outbox_messages GROUP BY 1"
            ).fetchall()
        )
        assert set(where) == {"outbox_messages_legacy", today.name}
        assert where["outbox_messages_legacy"] >= len(before) + len(old.added) + 20
        # The sweeper goes on with them: a claim takes the old table's due messages too.
        claimed = outbox.claim_messages(conn, limit=5000, lease_seconds=60)
        assert {m.deduplication_key for m in claimed} >= {
            k for k, (status, _, leased) in before.items() if status == "pending" and not leased
        }


def test_a_key_written_before_the_switch_deduplicates_after_it(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = empty_database_url
    monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: BEFORE)
    with psycopg.connect(url) as conn:
        migrate(conn)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(OLD_ADD, ("before_migration",))
        monkeypatch.setattr(migrate_module, "available_migrations", lambda *_: ALL)
        migrate(conn)
        assert _add(conn, "before_switch")  # this release, the table not switched yet
        assert not _add(conn, "before_migration")  # found by the old table's unique index
        assert not _add(conn, "before_switch")  # found by its key
        partition_switch.switch_to_partitions(conn, INBOX)
        # The key of a message from before the migration is filled by the first add that
        # meets it, or by the backfill: either way it points at the one message.
        conn.execute(OLD_ADD, ("before_prepare",))
        partition_switch.switch_to_partitions(conn, OUTBOX)
        for key in ("before_migration", "before_switch", "before_prepare"):
            assert not _add(conn, key), key
        assert _add(conn, "after_switch")
        assert not _add(conn, "after_switch")
        counts = conn.execute(
            "SELECT deduplication_key, count(*) FROM outbox_messages GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert counts == [
            ("after_switch", 1),
            ("before_migration", 1),
            ("before_prepare", 1),
            ("before_switch", 1),
        ]
        # The keys table holds for every writer, not only add_message (the trigger).
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO outbox_messages (topic, deduplication_key, payload)"
                " VALUES ('t', 'before_migration', '{}')"
            )


def test_the_outbox_switch_waits_for_the_inbox_and_a_busy_outbox_changes_nothing(
    empty_database_url: str,
) -> None:
    url = empty_database_url
    with psycopg.connect(url) as conn:
        migrate(conn)
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(StoreError):
            partition_switch.advance_switch(conn, OUTBOX)  # the inbox first
        partition_switch.switch_to_partitions(conn, INBOX)
        for step in ("prepare", "switch"):
            while partition_switch.switch_state(conn, OUTBOX).next_step != step:
                partition_switch.advance_switch(conn, OUTBOX)
            with psycopg.connect(url) as writer:
                _add(writer, f"held_{step}")  # a processor's open transaction
                started = time.monotonic()
                with pytest.raises(StoreLockTimeout):
                    partition_switch.advance_switch(conn, OUTBOX, wait_for_release=False)
                waited_ms = (time.monotonic() - started) * 1000
                writer.rollback()
            assert partition_switch.switch_state(conn, OUTBOX).next_step == step
            assert CLAIM_LOCK_WAIT_MS <= waited_ms < CLAIM_LOCK_WAIT_MS + 2000


def test_retention_drops_a_published_day_and_keeps_a_day_with_a_pending_or_dead_message(
    conn: psycopg.Connection[Any],
) -> None:
    published = old_outbox_day(conn, 100, ["published", "published", "published"])
    pending = old_outbox_day(conn, 99, ["published", "pending"])
    dead = old_outbox_day(conn, 98, ["published", "dead"])
    conn.execute(
        "INSERT INTO operator_actions (action, operator, reason, outbox_id)"
        " VALUES ('outbox_retry', 'ops', 'test', %s)",
        (published.low + 1,),
    )

    assert partitions.detach_if_expired(conn, pending, days=90).unfinished
    assert partitions.detach_if_expired(conn, dead, days=90).unfinished
    assert not partitions.detach_if_expired(conn, published, days=90)
    state = {p.name: p.attached for p in partitions.partitions(conn, OUTBOX)}
    assert (state[pending.name], state[dead.name], state[published.name]) == (True, True, False)
    # The audit row stays, without its reference (what ON DELETE SET NULL did).
    assert conn.execute("SELECT outbox_id FROM operator_actions").fetchone() == (None,)
    # Detached, its keys not yet forgotten: the same key again is still a duplicate.
    assert not _add(conn, "k_100_0")

    detached = partitions.Partition(
        published.name, published.low, published.high, attached=False, table=OUTBOX
    )
    assert partitions.forget_keys(conn, detached, limit=2) == 2
    assert partitions.forget_keys(conn, detached, limit=2) == 1
    assert partitions.drop_detached(conn, detached) is True
    assert partitions.drop_detached(conn, detached) is False  # an overlapping sweeper's
    assert published.name not in {p.name for p in partitions.partitions(conn, OUTBOX)}
    # Forgotten: the key is new again, as after any key retention.
    assert _add(conn, "k_100_1")
    # The kept days' messages and keys are all there.
    assert not _add(conn, "k_99_0")
    assert not _add(conn, "k_98_1")


def test_row_by_row_deletion_leaves_a_day_whole_until_its_whole_day_is_past_the_retention(
    conn: psycopg.Connection[Any],
) -> None:
    # A kept day past the retention: its published message goes row by row, the dead one stays.
    dead = old_outbox_day(conn, 98, ["published", "dead"])
    # The day on the retention's edge: its early messages are past the retention by the
    # clock, but its day is not, so it is left whole for tomorrow's drop.
    edge = old_outbox_day(conn, 90, ["published"])
    conn.execute(
        "UPDATE outbox_messages SET created_at = date_trunc('day', now(), 'UTC')"
        " - interval '90 days' + interval '1 second' WHERE id = %s",
        (edge.low + 1,),
    )
    # The old table's: by its created_at, as before the switch.
    conn.execute(
        "INSERT INTO outbox_messages (id, topic, deduplication_key, payload, status,"
        " created_at, published_at) VALUES"
        " (7, 't', 'legacy_old', '{}', 'published', now() - interval '91 days', now()),"
        " (8, 't', 'legacy_new', '{}', 'published', now() - interval '89 days', now())"
    )

    assert outbox.delete_published(conn, older_than_days=90, limit=100) == 2
    left = {r[0] for r in conn.execute("SELECT deduplication_key FROM outbox_messages")}
    assert left == {"k_98_1", "k_90_0", "legacy_new"}
    # Their keys went with them.
    assert _add(conn, "k_98_0")
    assert _add(conn, "legacy_old")
    assert not _add(conn, "k_98_1")
    assert dead.name in {p.name for p in partitions.partitions(conn, OUTBOX)}


def test_next_due_is_a_days_whole_retention_and_a_dead_message_alone_is_never_due(
    conn: psycopg.Connection[Any],
) -> None:
    day = old_outbox_day(conn, 5, ["published", "dead"])
    due = outbox.next_due(conn, key_days=90)
    start = datetime.combine(datetime.now(UTC).date() - timedelta(days=5), datetime.min.time(), UTC)
    assert due == (start + timedelta(days=91)).timestamp()
    conn.execute("DELETE FROM outbox_messages WHERE id = %s", (day.low + 1,))
    assert outbox.next_due(conn, key_days=90) is None  # the dead one waits for an operator


def test_the_outbox_switch_waits_a_day_after_its_migration_for_the_release_before_to_be_gone(
    empty_database_url: str,
) -> None:
    """As the inbox's: the release before's add_message names deduplication_key in ON CONFLICT,
    which the partitioned outbox cannot serve, so the switch waits out the deploy that applied
    0013 (and a rollback of it); the steps before it do not."""
    url = empty_database_url
    with psycopg.connect(url) as conn:
        migrate(conn)
    with psycopg.connect(url, autocommit=True) as conn:
        partition_switch.switch_to_partitions(conn, INBOX)
        while partition_switch.switch_state(conn, OUTBOX).next_step != "switch":
            partition_switch.advance_switch(conn, OUTBOX)
        assert partition_switch.advance_switch(conn, OUTBOX) == partition_switch.WAIT_FOR_RELEASE
        conn.execute(OLD_ADD, ("old_before",))  # the release before still queues messages
        conn.execute(
            "UPDATE schema_migrations SET applied_at = now() - make_interval(hours => %s)"
            " WHERE version = '0013'",
            (partition_switch.RELEASE_SETTLE_HOURS,),
        )
        assert partition_switch.advance_switch(conn, OUTBOX) == "switch"
        with pytest.raises(psycopg.errors.InvalidColumnReference):
            conn.execute(OLD_ADD, ("old_after",))
        assert not _add(conn, "old_before")  # kept, and deduplicated by its key
