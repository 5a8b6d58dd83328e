"""Which statements the fast pass's guard counts as maybe opening a savepoint
(webhook_inbox.store.savepoint_watch): a miss would let a later handler's ROLLBACK TO go unseen,
a false alarm only costs a mark."""

from __future__ import annotations

import pytest
from psycopg import sql

from webhook_inbox.store.savepoint_watch import _may_open_savepoint

OPENS = [
    "SAVEPOINT a",
    "  \n\tsavepoint a",
    "-- why\nSAVEPOINT a",
    "/* outer /* nested */ still outer */ SaVePoInT a",
    "/* a */ -- b\n  /* c */SAVEPOINT a",
    b"savepoint a",
    sql.SQL("-- from a sql file\nSAVEPOINT a"),
    sql.SQL("SAVEPOINT {}").format(sql.Identifier("a")),
    "/* never closed SAVEPOINT a",  # the server decides what that is; we cannot tell
]
DOES_NOT = [
    "INSERT INTO t VALUES (1)",
    "-- SAVEPOINT in a comment\nINSERT INTO t VALUES (1)",
    "/* SAVEPOINT */ SELECT 1",
    "ROLLBACK TO SAVEPOINT a",
    "RELEASE SAVEPOINT a",
    b"  select 'SAVEPOINT'",
    sql.SQL("-- a comment only"),
    "",
]


@pytest.mark.parametrize("query", OPENS, ids=repr)
def test_a_savepoint_in_any_spelling_is_noted(query: str | bytes | sql.Composable) -> None:
    assert _may_open_savepoint(query, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("query", DOES_NOT, ids=repr)
def test_other_statements_are_not(query: str | bytes | sql.Composable) -> None:
    assert not _may_open_savepoint(query, None)  # type: ignore[arg-type]
