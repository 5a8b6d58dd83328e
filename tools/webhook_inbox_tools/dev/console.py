"""The dev console's watchers: each inbox state change, each message the outbox published, each
wake-up that reached the DLQ, printed as one line (polled, on threads the stack starts)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from webhook_inbox.errors import WebhookInboxError
from webhook_inbox.store import db
from webhook_inbox.store.queries import SqlFile
from webhook_inbox_tools.dev import changes
from webhook_inbox_tools.dev.workers import say

_statement = SqlFile("dev", package="webhook_inbox_tools").statement


@dataclass
class Console:
    database_url: str
    region: str
    endpoint: str
    tap_url: str
    dlq_url: str
    bus_name: str
    max_receive_count: int
    stopping: threading.Event
    registry_arn: str = ""

    def watch_transitions(self) -> None:
        """Print each inbox row's state change (polled, so a very brief state may be skipped)."""
        # Keyed on updated_at too: a replayed event ends as it did before (processed, attempt 1),
        # and would otherwise go by without a line.
        seen: dict[int, tuple[str, int, datetime]] = {}
        since = datetime.now(UTC) - timedelta(seconds=1)
        with db.connect(self.database_url, application_name="webhook-inbox-dev-console") as conn:
            conn.autocommit = True
            while not self.stopping.wait(0.3):
                rows = conn.execute(_statement("recent_events"), {"since": since}).fetchall()
                for (
                    row_id,
                    provider,
                    event_id,
                    event_type,
                    status,
                    attempts,
                    kind,
                    error,
                    updated,
                ) in rows:
                    before = seen.get(row_id)
                    if before == (status, attempts, updated):
                        continue
                    seen[row_id] = (status, attempts, updated)
                    was = before[0] if before else "new"
                    detail = f" attempt {attempts}" if attempts else ""
                    if error and status in {"failed", "dead_letter"}:
                        detail += f" ({kind}: {error[:80]})"
                    change = f"{status} again" if was == status else f"{was} -> {status}"
                    if status == "processed" and not changes.changed(conn, row_id):
                        detail += ", no change"  # the handler wrote nothing and emitted nothing
                    say("event", f"{provider}/{event_id} [{event_type}] {change}{detail}")
                    since = max(since, updated - timedelta(seconds=1))

    def _drain(self, url: str) -> list[dict[str, Any]]:
        import boto3

        sqs = boto3.client("sqs", region_name=self.region, endpoint_url=self.endpoint)
        reply = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        messages: list[dict[str, Any]] = [dict(m) for m in reply.get("Messages", [])]
        for m in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return messages

    def watch_outbox(self) -> None:
        while not self.stopping.wait(0.5):
            for message in self._drain(self.tap_url):
                try:
                    event = json.loads(message["Body"])
                    text = (
                        f"published to {self.bus_name}: {event.get('detail-type')} "
                        f"from {event.get('source')}: {json.dumps(event.get('detail'))[:200]}"
                    )
                except (ValueError, AttributeError):
                    text = f"published: {message['Body'][:200]}"
                say("outbox", text)

    def watch_providers(self) -> None:
        """Announce each change `webhook-inbox providers` makes to this dev's registry: dev's
        ingest re-reads it every second, so it serves the change from that moment."""
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        from webhook_inbox.errors import ConfigurationError
        from webhook_inbox.ingest.provider_registry import parse_document

        client = boto3.client("secretsmanager", region_name=self.region, endpoint_url=self.endpoint)
        seen: str | None = None
        known = 0
        while not self.stopping.wait(0.5):
            try:
                reply = client.get_secret_value(SecretId=self.registry_arn)
                if reply["VersionId"] == seen:
                    continue
                history = parse_document(reply["SecretString"]).history
            except (BotoCoreError, ClientError, ConfigurationError):
                continue
            if seen is not None:
                for entry in history[known:]:
                    live = datetime.now().strftime("%H:%M:%S")
                    say(
                        "dev",
                        f"providers: {entry['action']} {entry['provider']} by {entry['by']}: "
                        f"served from {live} (dev re-reads its registry every second)",
                    )
            seen, known = reply["VersionId"], len(history)

    def watch_dlq(self) -> None:
        while not self.stopping.wait(1.0):
            for message in self._drain(self.dlq_url):
                say(
                    "dlq",
                    f"{self.event_named(message['Body'])}: its wake-up moved to the DLQ after "
                    f"{self.max_receive_count} receives (the sweeper still owns the row)",
                )

    def event_named(self, wakeup: str) -> str:
        """``provider/event_id [type] (status)`` for a wake-up's row, else the message as is."""
        try:
            row_id = int(json.loads(wakeup)["id"])
            with db.connect(self.database_url, application_name="webhook-inbox-dev-console") as c:
                row = c.execute(_statement("event_by_row"), {"id": row_id}).fetchone()
        except (ValueError, KeyError, TypeError, WebhookInboxError, psycopg.Error):
            row = None
        if row is None:
            return f"message {wakeup}"
        provider, event_id, event_type, status = row
        return f"{provider}/{event_id} [{event_type}] ({status})"
