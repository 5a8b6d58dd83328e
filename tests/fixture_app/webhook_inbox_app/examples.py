"""Two example domain handlers, for Stripe and for a Standard Webhooks sender named ``example``.

Subscriptions — version-guarded upsert: a newer ``provider_version`` wins, an equal or older one
is a no-op (events arrive out of order; the newest state must stick).
  * Stripe ``customer.subscription.updated``: the subscription is ``data.object``; its version is
    the event's ``created`` (Unix seconds). Stripe objects carry no revision counter, so two
    updates within the same second tie and the first one applied wins — fetch the object from
    the API in your handler if that matters to you.
  * ``example`` ``subscription.updated``: the subscription is ``data``; its version is
    ``data.version`` (an integer the sender increments on every change).

Customers — created / deleted, where a delete may arrive before its create: the delete leaves a
tombstone (``status = 'deleted'``, no ``created_event_id``) and the late create is a no-op, so a
deleted customer never comes back to life.
  * Stripe ``customer.created`` / ``customer.deleted``: the customer is ``data.object``.
  * ``example`` ``customer.created`` / ``customer.deleted``: the customer is ``data``.

The ``example`` payloads carry ``schema_version`` (default 1); any other version is a permanent
error (dead letter at once). Every applied change emits one outbox message (topics
``subscription.updated``, ``customer.created``, ``customer.deleted``); a no-op emits nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from psycopg import Connection

from webhook_inbox.errors import PermanentEventError
from webhook_inbox.processing.domain import LeasedEvent, emit, optional_field, required_field
from webhook_inbox.store.queries import SqlFile

SUPPORTED_EXAMPLE_SCHEMA_VERSIONS = frozenset({1})


@dataclass(frozen=True)
class SubscriptionState:
    subscription_id: str
    customer_id: str | None
    status: str
    version: int


_statement = SqlFile("examples", package="webhook_inbox_app").statement


def _apply_subscription(
    conn: Connection[Any], event: LeasedEvent, state: SubscriptionState
) -> None:
    row = conn.execute(
        _statement("upsert_subscription"),
        {
            "provider": event.provider,
            "subscription_id": state.subscription_id,
            "customer_id": state.customer_id,
            "status": state.status,
            "provider_version": state.version,
            "source_event_id": event.event_id,
        },
    ).fetchone()
    if row is None:  # an equal or newer version is stored already
        return
    emit(
        conn,
        event,
        topic="subscription.updated",
        payload={"provider": event.provider, "source_event_id": event.event_id, **asdict(state)},
    )


def _create_customer(conn: Connection[Any], event: LeasedEvent, customer_id: str) -> None:
    params = {
        "provider": event.provider,
        "customer_id": customer_id,
        "source_event_id": event.event_id,
    }
    if conn.execute(_statement("create_customer"), params).fetchone() is None:
        return  # exists, or was deleted before this create arrived: the tombstone wins
    emit(
        conn,
        event,
        topic="customer.created",
        payload={
            "provider": event.provider,
            "customer_id": customer_id,
            "source_event_id": event.event_id,
        },
    )


def _delete_customer(conn: Connection[Any], event: LeasedEvent, customer_id: str) -> None:
    params = {
        "provider": event.provider,
        "customer_id": customer_id,
        "source_event_id": event.event_id,
    }
    row = conn.execute(_statement("delete_customer"), params).fetchone()
    if row is None:
        return  # already deleted
    emit(
        conn,
        event,
        topic="customer.deleted",
        payload={
            "provider": event.provider,
            "customer_id": customer_id,
            "source_event_id": event.event_id,
            "before_created": bool(row[0]),
        },
    )


# --- Stripe --------------------------------------------------------------------------------


# Fields are read by their whole path from the payload's root, so that the path a dead-lettered
# event's last_error names is the one docs/local.md lists (data.object.id, not id).


def stripe_subscription_updated(conn: Connection[Any], event: LeasedEvent) -> None:
    payload = event.payload
    state = SubscriptionState(
        subscription_id=required_field(payload, "data.object.id", str, max_length=255),
        customer_id=optional_field(payload, "data.object.customer", str, max_length=255),
        status=required_field(payload, "data.object.status", str, max_length=64),
        version=required_field(payload, "created", int),
    )
    _apply_subscription(conn, event, state)


def stripe_customer_created(conn: Connection[Any], event: LeasedEvent) -> None:
    _create_customer(
        conn, event, required_field(event.payload, "data.object.id", str, max_length=255)
    )


def stripe_customer_deleted(conn: Connection[Any], event: LeasedEvent) -> None:
    _delete_customer(
        conn, event, required_field(event.payload, "data.object.id", str, max_length=255)
    )


# --- the `example` Standard Webhooks sender --------------------------------------------------


def _example_payload(event: LeasedEvent) -> Any:
    version = optional_field(event.payload, "schema_version", int)
    if version is not None and version not in SUPPORTED_EXAMPLE_SCHEMA_VERSIONS:
        raise PermanentEventError(f"unsupported schema_version {version}")
    return event.payload


def example_subscription_updated(conn: Connection[Any], event: LeasedEvent) -> None:
    payload = _example_payload(event)
    state = SubscriptionState(
        subscription_id=required_field(payload, "data.id", str, max_length=255),
        customer_id=optional_field(payload, "data.customer_id", str, max_length=255),
        status=required_field(payload, "data.status", str, max_length=64),
        version=required_field(payload, "data.version", int),
    )
    _apply_subscription(conn, event, state)


def example_customer_created(conn: Connection[Any], event: LeasedEvent) -> None:
    customer_id = required_field(_example_payload(event), "data.id", str, max_length=255)
    _create_customer(conn, event, customer_id)


def example_customer_deleted(conn: Connection[Any], event: LeasedEvent) -> None:
    customer_id = required_field(_example_payload(event), "data.id", str, max_length=255)
    _delete_customer(conn, event, customer_id)
