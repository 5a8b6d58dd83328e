"""The testing kit's `webhook_inbox` fixture: deliveries through the real ingest and processor,
and what they changed; and docs/handlers.md's test file, run as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import ROOT, PostgresServer

DOC = ROOT / "docs" / "handlers.md"


def test_a_delivery_is_stored_processed_and_its_changes_shown(webhook_inbox: Any) -> None:
    from webhook_inbox.processing import batch

    level = batch.logger.log_level
    done = webhook_inbox.deliver(
        "example", "subscription.updated", overrides=["data.id=sub_1", "data.version=5"]
    )
    assert (done.status, done.state, done.last_error) == (202, "processed", None)
    (row,) = done.changes["subscriptions"].added
    assert (row["subscription_id"], row["provider_version"]) == ("sub_1", 5)
    assert done.changes["subscriptions"].removed == []
    assert [m["topic"] for m in done.outbox] == ["subscription.updated"]
    assert done.changed is True
    # The processor's lines are held back while the kit processes, and only then.
    assert batch.logger.log_level == level
    # An older version afterwards: processed, and nothing changes.
    older = webhook_inbox.deliver(
        "example", "subscription.updated", overrides=["data.id=sub_1", "data.version=4"]
    )
    assert (older.state, older.changed, older.outbox) == ("processed", False, [])


def test_an_update_shows_the_row_lost_and_the_row_gained(webhook_inbox: Any) -> None:
    webhook_inbox.deliver(
        "example", "subscription.updated", overrides=["data.id=s", "data.version=1"]
    )
    newer = webhook_inbox.deliver(
        "example", "subscription.updated", overrides=["data.id=s", "data.version=2"]
    )
    assert [r["provider_version"] for r in newer.changes["subscriptions"].removed] == [1]
    assert [r["provider_version"] for r in newer.changes["subscriptions"].added] == [2]


def test_a_duplicate_delivery_is_answered_200_and_processed_once(webhook_inbox: Any) -> None:
    first = webhook_inbox.deliver("example", "customer.created", event_id="msg_same")
    again = webhook_inbox.deliver(
        "example", "customer.created", event_id="msg_same", overrides=["data.id=cus_other"]
    )
    assert (first.status, again.status) == (202, 200)
    assert again.row_id == first.row_id
    assert again.changed is False


def test_what_ingest_refuses_is_answered_and_nothing_is_stored(webhook_inbox: Any) -> None:
    ignored = webhook_inbox.deliver("example", "invoice.paid")  # no handler for the type
    assert (ignored.status, ignored.state, ignored.changed) == (202, "ignored", False)
    invalid = webhook_inbox.deliver("example", "customer.created", payload={"no": "type"})
    assert invalid.status == 400
    assert (invalid.row_id, invalid.state) == (None, None)


def test_a_payload_of_the_users_and_a_handler_that_refuses_it(webhook_inbox: Any) -> None:
    done = webhook_inbox.deliver(
        "example",
        "customer.created",
        payload={"type": "customer.created", "schema_version": 2, "data": {"id": "cus_9"}},
        event_id="msg_v2",
    )
    assert (done.status, done.state) == (202, "dead_letter")
    assert "schema_version" in (done.last_error or "")
    assert done.changed is False


def test_the_documented_test_file_passes_as_a_user_runs_it(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    text = DOC.read_text()
    block = re.search(r"<!-- handler-test-example -->\n```python\n(.*?)```", text, re.DOTALL)
    assert block, "docs/handlers.md lost its test file"
    test_file = tmp_path / "test_my_handlers.py"
    test_file.write_text(block[1])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
        env={**os.environ, "WEBHOOK_INBOX_TEST_SERVER": pg_server.admin_url},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_built_in_forwarder_sends_every_event_of_a_pattern_unchanged(
    webhook_inbox_lab: Any,
) -> None:
    """`("stripe", "*"): forward` — the verified event, unchanged, to the outbox, its topic
    (EventBridge's detail-type) `<provider>.<type>` for rules to route by."""
    from webhook_inbox_tools.handler_lab.check import providers_registry
    from webhook_inbox_tools.handler_lab.inbox import Inbox

    registry = providers_registry(str(ROOT / "events" / "providers.local.json"))
    from webhook_inbox.processing import handlers

    before = dict(handlers.HANDLERS)
    inbox = Inbox(webhook_inbox_lab, registry, "tests.handler_apps.forwarding:HANDLERS")
    try:
        paid = inbox.deliver("stripe", "invoice.paid", overrides=["data.object.amount_paid=1234"])
        created = inbox.deliver("stripe", "customer.created")
        ignored = inbox.deliver("example", "customer.created")  # no key for that provider
    finally:
        inbox.close()
    assert before == handlers.HANDLERS  # the process's own handlers are back
    assert (paid.state, created.state) == ("processed", "processed")
    ((message,), (other,)) = paid.outbox, created.outbox
    assert (message["topic"], other["topic"]) == ("stripe.invoice.paid", "stripe.customer.created")
    assert message["payload"]["data"]["object"]["amount_paid"] == 1234
    assert message["payload"]["id"] == paid.event_id
    assert (ignored.state, ignored.outbox) == ("ignored", [])
