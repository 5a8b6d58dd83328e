"""What `webhook-inbox dev` refused, kept in its database (``dev_refused_deliveries``): each
delivery it answered other than 2xx, by provider, status, reason, the bounded detail ingest's
outcome carries and the provider's delivery id when known — never a body, a header or a secret.

A deployed stack keeps the same facts as the Rejected metric and ingest's log lines; dev keeps
them where `webhook-inbox events rejected` and `providers list` read them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import Connection

from webhook_inbox.errors import StoreError
from webhook_inbox.store import db
from webhook_inbox.store.queries import SqlFile
from webhook_inbox_tools.dev.workers import say

_statement = SqlFile("dev", package="webhook_inbox_tools").statement


def create_table(conn: Connection[Any]) -> None:
    conn.execute(_statement("create_refused_deliveries"))


class Recorder:
    """Writes one row per refused delivery on a connection of its own (the gateway's threads
    share it one at a time); a database that fails is said once, never raised into a reply."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url
        self._failed = False

    def record(self, provider: str, status: int, outcome: dict[str, Any] | None) -> None:
        found = outcome or {}
        try:
            with db.connect(self._url, application_name="webhook-inbox-dev-refusals") as conn:
                conn.execute(
                    _statement("record_refusal"),
                    {
                        "provider": provider,
                        "status": status,
                        "reason": found.get("reason"),
                        "detail": found.get("detail"),
                        "delivery_id": found.get("delivery_id"),
                    },
                )
        except StoreError as exc:
            if not self._failed:
                say("dev", f"could not record a refused delivery: {exc}")
            self._failed = True


def refused(
    conn: Connection[Any], *, since: datetime, provider: str | None, limit: int
) -> list[dict[str, Any]] | None:
    """The newest refusals since ``since`` (None: this database is not a dev's)."""
    from psycopg.rows import dict_row

    if not conn.execute(_statement("has_refused_deliveries")).fetchone()[0]:  # type: ignore[index]
        return None
    with conn.cursor(row_factory=dict_row) as cur:
        return list(
            cur.execute(
                _statement("refused_deliveries"),
                {"since": since, "provider": provider, "limit": limit},
            )
        )


def counts_by_provider(
    conn: Connection[Any], *, since: datetime, providers: list[str]
) -> dict[str, int] | None:
    """Refusals per provider since ``since`` (None: this database is not a dev's)."""
    if not conn.execute(_statement("has_refused_deliveries")).fetchone()[0]:  # type: ignore[index]
        return None
    rows = conn.execute(
        _statement("refusals_by_provider"), {"since": since, "providers": providers}
    ).fetchall()
    return {name: int(count) for name, count in rows}


def reasons(
    conn: Connection[Any], *, since: datetime, limit: int = 20
) -> list[dict[str, Any]] | None:
    """Refusals since ``since`` by provider and reason, most frequent first (None: this
    database is not a dev's)."""
    from psycopg.rows import dict_row

    if not conn.execute(_statement("has_refused_deliveries")).fetchone()[0]:  # type: ignore[index]
        return None
    with conn.cursor(row_factory=dict_row) as cur:
        return list(cur.execute(_statement("refusal_reasons"), {"since": since, "limit": limit}))
