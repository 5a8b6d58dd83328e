"""Handlers that are not idempotent or not order-safe, and their guarded twins.

``NAIVE`` is what check-handlers must fail, ``GUARDED`` what it must pass; both use provider
``example`` (a Standard Webhooks sender) and its sample types."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import Connection

from webhook_inbox.processing.domain import Handler, LeasedEvent, emit, required_field


def _customer(event: LeasedEvent) -> str:
    return required_field(event.payload, "data.id", str)


def count_unguarded(conn: Connection[Any], event: LeasedEvent) -> None:
    """A counter incremented once per event: a redelivery under a new id counts twice."""
    conn.execute(
        "INSERT INTO seen_counts (customer_id, seen) VALUES (%s, 1)"
        " ON CONFLICT (customer_id) DO UPDATE SET seen = seen_counts.seen + 1",
        (_customer(event),),
    )


def insert_unguarded(conn: Connection[Any], event: LeasedEvent) -> None:
    """An insert into a table without a unique key: every run adds a row, and emits."""
    conn.execute(
        "INSERT INTO signups (customer_id, email) VALUES (%s, %s)",
        (_customer(event), event.payload["data"].get("email")),
    )
    emit(conn, event, topic="signup", payload={"customer": _customer(event)})


def upsert_unversioned(conn: Connection[Any], event: LeasedEvent) -> None:
    """The last event processed wins, whatever its version: an older one undoes a newer one."""
    data = event.payload["data"]
    conn.execute(
        "INSERT INTO plans (subscription_id, status, version) VALUES (%s, %s, %s)"
        " ON CONFLICT (subscription_id) DO UPDATE"
        " SET status = excluded.status, version = excluded.version",
        (data["id"], data["status"], data["version"]),
    )


def write_elsewhere(conn: Connection[Any], event: LeasedEvent) -> None:
    """Writes on a connection of its own: committed at once, whatever happens to the event's
    transaction, so a failure after it and the retry write twice."""
    with psycopg.connect(os.environ["DATABASE_URL"]) as own:
        own.execute(
            "INSERT INTO signups (customer_id, email) VALUES (%s, NULL)",
            (required_field(event.payload, "data.customer_id", str),),
        )


def insert_guarded(conn: Connection[Any], event: LeasedEvent) -> None:
    """The insert, once per customer (the emit only when the row is new)."""
    inserted = conn.execute(
        "INSERT INTO seen_counts (customer_id, seen) VALUES (%s, 1)"
        " ON CONFLICT (customer_id) DO NOTHING RETURNING customer_id",
        (_customer(event),),
    ).fetchone()
    if inserted:
        emit(conn, event, topic="signup", payload={"customer": _customer(event)})


def upsert_versioned(conn: Connection[Any], event: LeasedEvent) -> None:
    """A newer version wins; an equal or older one changes nothing."""
    data = event.payload["data"]
    conn.execute(
        "INSERT INTO plans (subscription_id, status, version) VALUES (%s, %s, %s)"
        " ON CONFLICT (subscription_id) DO UPDATE"
        " SET status = excluded.status, version = excluded.version"
        " WHERE plans.version < excluded.version",
        (data["id"], data["status"], data["version"]),
    )


NAIVE: dict[tuple[str, str], Handler] = {
    ("example", "customer.created"): count_unguarded,
    ("example", "customer.deleted"): insert_unguarded,
    ("example", "subscription.updated"): upsert_unversioned,
    ("example", "invoice.paid"): write_elsewhere,
}
GUARDED: dict[tuple[str, str], Handler] = {
    ("example", "customer.created"): insert_guarded,
    ("example", "subscription.updated"): upsert_versioned,
}
