"""The signed deliveries the ingest benchmarks send, and what stands in for SQS.

Signed Stripe ``customer.created`` events of a realistic size (~1 KB) as HTTP API v2 events, each
with the claim statement's parameters for the bare-``INSERT`` baseline.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from bench.common import ROOT, PerThreadConnections, silence_logger
from bench.stripe_events import stripe_body
from tests.ingest_support import v2_event
from tests.support import load_function
from webhook_inbox.ingest import providers
from webhook_inbox.store import inbox
from webhook_inbox.store.queries import query

PROVIDER = "stripe"


class StubSQS:
    """Stands in for the boto3 SQS client: accepts every message, sends nothing."""

    def __init__(self) -> None:
        self.sent = 0
        self._lock = threading.Lock()

    def send_message(self, *, QueueUrl: str, MessageBody: str) -> dict[str, str]:
        with self._lock:
            self.sent += 1
        return {"MessageId": str(uuid.uuid4())}


@dataclass
class Delivery:
    event: dict[str, Any]
    params: dict[str, Any]  # the claim statement's parameters, for the baseline


def make_deliveries(n: int, now: int) -> list[Delivery]:
    provider = providers.registry()[PROVIDER]
    made = []
    for _ in range(n):
        event_id = f"evt_{uuid.uuid4().hex}"
        body = stripe_body(event_id, now)
        headers = providers.sign_delivery(provider, body, timestamp=now).headers
        params = {
            "provider": PROVIDER,
            "event_ids": [event_id],
            "delivery_ids": [None],
            "event_types": ["customer.created"],
            "body_sha256": hashlib.sha256(body).digest(),
            # Already-serialised JSON, sent as is: the baseline does no client-side work.
            "payloads": inbox.payloads_array([inbox.JsonText(body.decode())]),
            "enqueuing": True,
            "rewake_after_s": inbox.REWAKE_AFTER_S,
            "lock_timeout": None,  # the session's (the claim bounds its own wait, see inbox.py)
        }
        params["recent_from"], params["recent_until"] = inbox.recent_ids()
        made.append(Delivery(v2_event(PROVIDER, body, headers), params))
    return made


def configure_providers() -> None:
    os.environ["PROVIDERS_CONFIG_FILE"] = str(ROOT / "events" / "providers.local.json")
    os.environ.pop("PROVIDERS_CONFIG", None)
    os.environ["PROCESSING_QUEUE_URL"] = "https://sqs.us-east-1.amazonaws.com/123456789012/bench"
    providers.reset_for_tests()


class Rig:
    """The ingest handler (stubbed SQS, logs to /dev/null) and the claim statement alone, over
    one database with a connection per thread, as separate execution environments have."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.app: ModuleType = load_function("ingest")
        silence_logger(self.app.logger)
        self.sqs = StubSQS()
        self.app.sqs_client = lambda: self.sqs  # the boto3 boundary
        self.now = int(time.time())
        self.connections = PerThreadConnections()
        self.claim_sql = query("inbox", "claim_events")

    def close(self) -> None:
        self.connections.close_all()
