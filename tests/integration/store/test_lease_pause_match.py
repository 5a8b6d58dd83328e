"""The lease writes out handler_pause_matches (migration 0006) instead of calling it (the
planner parses an inlined SQL function's body on every call): the two must answer alike."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from webhook_inbox.store.queries import query

PATTERNS = ["*", "invoice.*", "invoice.paid", "invoice.", "*.paid", "", "in*", "invoice.paid*"]
TYPES = ["invoice.paid", "invoice.", "invoice", "invoices.paid", "customer.created", "", "*", "in"]


def _written_out() -> str:
    """The match as the lease statement holds it: the parenthesised condition that begins with
    the pattern's IN test, up to its closing parenthesis."""
    text = query("inbox", "lease_events").as_string(None)
    start = text.index("(p.event_type IN ('*', w.event_type)")
    depth = 0
    for end, ch in enumerate(text[start:], start):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return text[start : end + 1]
    raise AssertionError("unbalanced")


def test_the_leases_pause_match_is_handler_pause_matches(conn: psycopg.Connection[Any]) -> None:
    statement = sql.SQL(
        "SELECT p.event_type, w.event_type, handler_pause_matches(p.event_type, w.event_type), {}"
        " FROM unnest(%s::text[]) AS p (event_type), unnest(%s::text[]) AS w (event_type)"
    ).format(sql.SQL(_written_out()))  # type: ignore[arg-type]  # the project's own text
    rows = conn.execute(statement, (PATTERNS, TYPES)).fetchall()
    assert len(rows) == len(PATTERNS) * len(TYPES)
    assert [r for r in rows if r[2] is not r[3]] == []
    assert any(r[2] for r in rows)
    assert not all(r[2] for r in rows)
