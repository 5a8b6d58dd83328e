"""Outbox rows of a past day, in that day's partition (the partitioned outbox's retention tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from webhook_inbox.store import partitions
from webhook_inbox.store.partitions import OUTBOX, Partition


def old_outbox_day(conn: psycopg.Connection[Any], days_ago: int, statuses: list[str]) -> Partition:
    """The outbox's partition of the day ``days_ago`` days ago, created with one message per
    status (keys ``k_<days_ago>_<n>``), each created and updated at noon that day."""
    day = datetime.now(UTC).date() - timedelta(days=days_ago)
    partitions.create_ahead(conn, days=0, today=day, table=OUTBOX)
    partition = partitions.day_partition(day, OUTBOX)
    at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=12)
    for n, status in enumerate(statuses):
        conn.execute(
            "INSERT INTO outbox_messages (id, topic, deduplication_key, payload, status,"
            " created_at, updated_at, published_at)"
            " VALUES (%s, 't', %s, '{}', %s, %s, %s, CASE WHEN %s = 'published' THEN %s END)",
            (partition.low + n + 1, f"k_{days_ago}_{n}", status, at, at, status, at),
        )
    return partition
