"""Helpers for the per-sender ingest tests (Mailgun, Linear, Zoom, Twitch, GitLab): the raw
answer (a handshake may be text/plain) and the stored row, read back with SQL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.ingest_support import SHAPES
from tests.integration.ingest.conftest import IngestHarness, providers_config
from tests.support import FakeLambdaContext

# Every event shape, with and without a base64-encoded body.
SHAPE_VARIANTS = [(shape, b64) for shape in SHAPES for b64 in (False, True)]


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: str


def answer(
    harness: IngestHarness,
    provider: str,
    body: bytes,
    headers: dict[str, str],
    *,
    shape: str = "v2",
    base64_body: bool = False,
) -> Answer:
    """The handler's reply as sent, without assuming a JSON body."""
    event = SHAPES[shape](provider, body, headers, base64_body=base64_body)
    raw = harness.app.handler(event, FakeLambdaContext())
    return Answer(raw["statusCode"], raw["headers"]["Content-Type"], raw["body"])


def events(conn: psycopg.Connection[Any], provider: str) -> list[dict[str, Any]]:
    """Every row stored for ``provider``, oldest first."""
    cur = conn.execute(
        "SELECT event_id, event_type, delivery_id, payload, delivery_count, enqueued_at"
        " FROM webhook_events WHERE provider = %s ORDER BY id",
        (provider,),
    )
    names = [c.name for c in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def flip(text: str, at: int = -5) -> str:
    """``text`` with one character replaced by another digit: a new value, not a case change."""
    at %= len(text)
    return text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1 :]


def add_provider(monkeypatch: pytest.MonkeyPatch, name: str, scheme: str, secret: str) -> None:
    """The harness's providers plus one more (a known-answer vector's secret, say)."""
    config = providers_config()
    config["providers"][name] = {"scheme": scheme, "secrets": [{"value": secret}]}
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))


ACCEPTED_200 = Answer(200, "application/json", '{"status":"accepted"}')
DUPLICATE = Answer(200, "application/json", '{"status":"duplicate"}')
UNAUTHORIZED = Answer(401, "application/json", '{"error":"unauthorized"}')
