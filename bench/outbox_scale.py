"""The partitioned outbox's part of ``bench/partition_scale.py``: its fill (as many messages as
the inbox has events, one day's partition each day, the same backlog at every size), its calls
(the processor's batch queueing a message per event, the sweeper's outbox steps) and the
retention of one day's messages by dropping its partition against ``DELETE``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg

from webhook_inbox.store import inbox, outbox, partitions
from webhook_inbox.store.partitions import OUTBOX

Conn = psycopg.Connection[Any]
OUTBOX_PENDING = 100  # pending messages in today's partition, the same at every size
DEAD_PER_DAY = 1  # dead messages in each recent day's partition, waiting for an operator
RETENTION_DAYS = 90

# One day's partition of messages numbered g in [first, last] (b counts from 0 in each day):
# today's first OUTBOX_PENDING are pending, each recent day's next DEAD_PER_DAY dead, the rest
# published (the old days' all published: one is dropped whole, the other deleted row by row).
FILL_DAY = """
INSERT INTO outbox_messages (id, topic, deduplication_key, payload, status, attempts,
    available_at, created_at, updated_at, published_at)
SELECT %(low)s + g, 't', 'k' || g, '{}'::jsonb, s, CASE WHEN s = 'pending' THEN 0 ELSE 1 END,
       at, at, at, CASE WHEN s = 'published' THEN at END
  FROM (SELECT g, g - %(first)s::bigint AS b, %(at)s::timestamptz AS at
          FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g) AS numbered,
       LATERAL (SELECT CASE
           WHEN b < %(pending)s THEN 'pending'
           WHEN b < %(pending)s + %(dead)s THEN 'dead'
           ELSE 'published' END AS s) AS status_of
"""
FILL_KEYS = (
    "INSERT INTO outbox_message_keys (deduplication_key, message_id)"
    " SELECT deduplication_key, id FROM outbox_messages"
)
# The row-level retention of the release before: 500 messages per statement (their keys go with
# each row, by trigger).
DELETE_BATCH = """
DELETE FROM outbox_messages
 WHERE id = ANY(ARRAY(
        SELECT id FROM outbox_messages
         WHERE id >= %(low)s AND id < %(high)s AND status = 'published'
           AND created_at < now() - make_interval(days => %(days)s)
         ORDER BY created_at
         LIMIT 500
           FOR UPDATE SKIP LOCKED))
"""


def fill(conn: Conn, days: list[date], per_day: int) -> None:
    """The outbox's days (after the inbox's, with the triggers off: the keys in one statement)."""
    today = datetime.now(UTC).date()
    for day in days:
        partitions.create_ahead(conn, days=0, today=day, table=OUTBOX)
    for n, day in enumerate(days):
        age = (today - day).days
        at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=12)
        if age == 0:
            at = datetime.now(UTC) - timedelta(minutes=10)
        conn.execute(
            FILL_DAY,
            {
                "low": partitions.day_partition(day, OUTBOX).low,
                "first": n * per_day + 1,
                "last": (n + 1) * per_day,
                "at": at,
                "pending": OUTBOX_PENDING if age == 0 else 0,
                "dead": DEAD_PER_DAY if age <= RETENTION_DAYS else 0,
            },
        )
    conn.execute(FILL_KEYS)


def works(
    conn: Conn, rows: int, received: list[int]
) -> tuple[dict[str, Callable[[int], None]], dict[str, Callable[[], Any]]]:
    """The processor's batch with its messages (its own transaction, rolled back), and the
    sweeper's outbox calls (the caller rolls each back)."""

    def batch_with_messages(n: int) -> None:
        ids = received[n * 10 : (n + 1) * 10]
        with conn.transaction(force_rollback=True):
            leased = inbox.lease_events(conn, ids, owner="bench", lease_seconds=60)
            for event in leased:
                outbox.queue_message(
                    conn,
                    topic="t",
                    deduplication_key=f"bench_{rows}_{n}_{event.id}",
                    payload={"n": n},
                    source_event_id=event.id,
                )
            sent = inbox.send_batch_marks(
                conn, processed=[e.id for e in leased], ignored=[], owner="bench", disposition=""
            )
            inbox.batch_latencies(sent)

    def duplicate_message(n: int) -> None:
        # A key of a recent day's published message: found by its key, nothing written.
        with conn.transaction(force_rollback=True):
            outbox.add_message(
                conn,
                topic="t",
                deduplication_key=f"k{rows // 3 + n}",
                payload={},
                source_event_id=None,
            )

    sweep: dict[str, Callable[[], Any]] = {
        "sweeper: outbox next_due_message": lambda: outbox.next_due(conn, key_days=RETENTION_DAYS),
        "sweeper: outbox retention check (partitions, blockers)": lambda: [
            partitions.blockers(conn, p, days=RETENTION_DAYS)
            for p in partitions.partitions(conn, OUTBOX)[:3]
        ],
    }
    own = {
        "processor: lease 10 + a message each + mark the batch": batch_with_messages,
        "outbox: add_message (duplicate key)": duplicate_message,
    }
    return own, sweep


def retention(
    conn: Conn, days: list[date], wal_bytes: Callable[[Conn, Callable[[], None]], Any]
) -> dict[str, Any]:
    """One old day's messages by partition (detach, keys forgotten, drop), the other's by the
    release before's DELETE: (seconds, WAL bytes) each."""
    dropped, deleted = (partitions.day_partition(d, OUTBOX) for d in days[:2])

    def by_partition() -> None:
        if partitions.detach_if_expired(conn, dropped, days=RETENTION_DAYS):
            raise SystemExit("the old outbox partition was kept: the fill is wrong")
        detached = partitions.Partition(
            dropped.name, dropped.low, dropped.high, attached=False, table=OUTBOX
        )
        while partitions.forget_keys(conn, detached) == partitions.KEY_BATCH:
            pass
        partitions.drop_detached(conn, detached)

    def by_delete() -> None:
        params = {"low": deleted.low, "high": deleted.high, "days": RETENTION_DAYS}
        while conn.execute(DELETE_BATCH, params).rowcount:
            pass

    return {"partition": wal_bytes(conn, by_partition), "delete": wal_bytes(conn, by_delete)}
