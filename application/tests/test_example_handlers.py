"""The example handlers' own tests, through the testing kit (docs/handlers.md): each delivery
is signed, ingested and processed for real against a throwaway PostgreSQL. Yours to change with
the handlers: delete these with the examples, add yours beside them."""

from __future__ import annotations

from typing import Any


def test_a_customer_is_created_once_and_announced_once(webhook_inbox: Any) -> None:
    first = webhook_inbox.deliver("stripe", "customer.created", overrides=["data.object.id=cus_1"])
    assert (first.status, first.state) == (202, "processed")
    assert [r["customer_id"] for r in first.changes["customers"].added] == ["cus_1"]
    assert [m["topic"] for m in first.outbox] == ["customer.created"]

    again = webhook_inbox.deliver("stripe", "customer.created", overrides=["data.object.id=cus_1"])
    assert (again.state, again.changed) == ("processed", False)


def test_a_deleted_customer_never_comes_back(webhook_inbox: Any) -> None:
    deleted = webhook_inbox.deliver("stripe", "customer.deleted", overrides=["data.object.id=c"])
    assert deleted.changes["customers"].added[0]["status"] == "deleted"  # a tombstone
    late = webhook_inbox.deliver("stripe", "customer.created", overrides=["data.object.id=c"])
    assert (late.state, late.changed) == ("processed", False)


def test_a_subscription_takes_the_newest_version_whatever_the_order(webhook_inbox: Any) -> None:
    newer = webhook_inbox.deliver(
        "stripe",
        "customer.subscription.updated",
        overrides=["data.object.id=sub_1", "created=2000", "data.object.status=canceled"],
    )
    assert newer.changes["subscriptions"].added[0]["status"] == "canceled"
    older = webhook_inbox.deliver(
        "stripe",
        "customer.subscription.updated",
        overrides=["data.object.id=sub_1", "created=1000", "data.object.status=active"],
    )
    assert (older.state, older.changed, older.outbox) == ("processed", False, [])
    rows = webhook_inbox.query("SELECT status, provider_version FROM subscriptions")
    assert rows == [{"status": "canceled", "provider_version": 2000}]


def test_the_standard_webhooks_examples_refuse_an_unknown_schema(webhook_inbox: Any) -> None:
    done = webhook_inbox.deliver(
        "example",
        "customer.created",
        payload={"type": "customer.created", "schema_version": 2, "data": {"id": "cus_9"}},
    )
    assert (done.status, done.state, done.changed) == (202, "dead_letter", False)
    assert "schema_version" in (done.last_error or "")
