"""docs/local.md describes the example handlers exactly enough to write a valid event (issue 16).

Each row of its handler table is turned into a payload holding exactly the fields it lists and
run through that handler on a real database: the documented fields are enough, every field it
calls required is, and its table of columns is the schema's.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.support import ROOT
from webhook_inbox.errors import PermanentEventError
from webhook_inbox.store import inbox
from webhook_inbox_app.handlers import HANDLERS

LOCAL_MD = (ROOT / "docs" / "local.md").read_text()
HANDLER_ROW = re.compile(r"^\| `(\w+)` `([\w.]+)` \| (.+?) \| .+\|$", re.MULTILINE)
FIELD = re.compile(r"`([\w.]+)`( \((?:optional|integer)[^)]*\))?")
TABLE_ROW = re.compile(r"^\| `(\w+)` \| (`.+`) \|$", re.MULTILINE)


def documented_handlers() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(provider, type) -> [(dotted path, "" or its annotation)] from the handler table."""
    return {
        (provider, event_type): [(m[1], m[2] or "") for m in FIELD.finditer(fields)]
        for provider, event_type, fields in HANDLER_ROW.findall(LOCAL_MD)
    }


def payload_with(fields: list[tuple[str, str]], omit: str = "") -> dict[str, Any]:
    """A body holding those fields (integers where the table says so), ``omit`` left out."""
    payload: dict[str, Any] = {}
    for path, note in fields:
        *parents, leaf = path.split(".")
        node = payload
        for key in parents:
            node = node.setdefault(key, {})
        if path != omit:
            node[leaf] = 7 if "integer" in note else f"{leaf}_{uuid.uuid4().hex[:6]}"
    return payload


def run_handler(conn: psycopg.Connection[Any], key: tuple[str, str], payload: Any) -> None:
    provider, event_type = key
    body = json.dumps(payload).encode()
    claimed = inbox.claim_event(
        conn,
        provider=provider,
        event_id=f"evt_{uuid.uuid4().hex[:10]}",
        event_type=event_type,
        body_sha256=hashlib.sha256(body).digest(),
        payload=payload,
    )
    now = datetime.now(UTC)
    event = inbox.LeasedEvent(
        claimed.id, provider, f"evt_{claimed.id}", None, event_type, payload, 1, now,
        now + timedelta(seconds=30),
    )  # fmt: skip
    with conn.transaction():
        HANDLERS[key](conn, event)


def domain_rows(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM customers) + (SELECT count(*) FROM subscriptions)"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_table_lists_every_registered_handler() -> None:
    assert set(documented_handlers()) == set(HANDLERS)


@pytest.mark.parametrize("key", sorted(HANDLERS), ids="/".join)
def test_the_documented_fields_are_enough_and_each_required_one_is(
    conn: psycopg.Connection[Any], key: tuple[str, str]
) -> None:
    fields = documented_handlers()[key]
    assert fields, f"{key}: the table lists no field"
    before = domain_rows(conn)
    run_handler(conn, key, payload_with(fields))
    assert domain_rows(conn) == before + 1, f"{key}: the documented payload changed nothing"
    for path, note in fields:
        if "optional" in note:
            continue
        without = payload_with(fields, omit=path)
        with pytest.raises(PermanentEventError, match=re.escape(path.rsplit(".", 1)[-1])):
            run_handler(conn, key, without)


def test_the_minimal_example_event_shown_is_processed(conn: psycopg.Connection[Any]) -> None:
    shown = LOCAL_MD.split("A minimal `example` subscription event:", 1)[1]
    payload = json.loads(shown.split("```json", 1)[1].split("```", 1)[0])
    run_handler(conn, ("example", payload["type"]), payload)
    assert conn.execute("SELECT status FROM subscriptions").fetchall() == [
        (payload["data"]["status"],)
    ]


@pytest.mark.parametrize("table", ["customers", "subscriptions"])
def test_the_documented_columns_are_the_tables(conn: psycopg.Connection[Any], table: str) -> None:
    documented = dict(TABLE_ROW.findall(LOCAL_MD))[table]
    columns = {name for name, _ in re.findall(r"`(\w+)`( \([^)]*\))?", documented)}
    actual = {
        name
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", (table,)
        )
    }
    assert columns == actual
