"""Retention: drop old payloads early, old deduplication keys late. SQL in ``sql/sweeper.sql``.

Each function is one bounded statement (at most ``limit`` rows, locked with SKIP LOCKED) so the
caller can run it in a short transaction and stop between batches. None commits.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from webhook_inbox.db import translated
from webhook_inbox.queries import query


def _run(conn: Connection[Any], name: str, *, days: int, limit: int) -> int:
    if days < 1 or limit < 1:
        raise ValueError("retention days and batch limit must be positive")
    return conn.execute(query("sweeper", name), {"days": days, "limit": limit}).rowcount


@translated
def purge_payloads(conn: Connection[Any], *, older_than_days: int, limit: int) -> int:
    """Null the payload of processed/ignored rows last changed before the cutoff; row count."""
    return _run(conn, "purge_payloads", days=older_than_days, limit=limit)


@translated
def delete_expired_events(conn: Connection[Any], *, older_than_days: int, limit: int) -> int:
    """Delete terminal rows (processed, ignored, dead_letter) last changed before the cutoff."""
    return _run(conn, "delete_expired_events", days=older_than_days, limit=limit)


@translated
def delete_published_outbox(conn: Connection[Any], *, older_than_days: int, limit: int) -> int:
    """Delete published outbox messages created before the cutoff."""
    return _run(conn, "delete_published_outbox", days=older_than_days, limit=limit)
