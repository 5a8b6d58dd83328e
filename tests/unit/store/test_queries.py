import pytest

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.store.queries import parse, query, without_comments


def test_parse_splits_named_blocks() -> None:
    text = "-- header comment\n-- name: first\nSELECT 1\n\n-- name: second\n-- why\nSELECT 2\n"
    assert parse(text) == {"first": "SELECT 1", "second": "-- why\nSELECT 2"}


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")


def test_unknown_query_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="no query 'nope'"):
        query("inbox", "nope")


@pytest.mark.parametrize(
    ("group", "name"),
    [("inbox", "claim_events"), ("inbox", "lease_events"), ("outbox", "claim_messages")],
)
def test_packaged_queries_load(group: str, name: str) -> None:
    assert query(group, name).as_string(None).strip()


def test_statements_are_sent_without_their_comments() -> None:
    text = "-- why\n-- and how\nSELECT a, -- the key\n       b\n  -- between\n  FROM t -- last"
    assert without_comments(text) == "SELECT a, \n       b\n  FROM t"


@pytest.mark.parametrize(
    "kept",
    [
        "SELECT '-- not a comment', 'it''s -- still text'",
        'SELECT "odd--name" FROM t',
        "SELECT $$ -- a body\n\n  -- kept whole $$",
        "SELECT $fn$ it's -- $$ inside $fn$",
        "SELECT E'\\' -- escaped quote, still text'",
        "SELECT %(a)s, $1 FROM t",
        "SELECT 1 /* a block comment -- stays /* nested */ -- too */",
    ],
)
def test_comment_marks_inside_literals_and_bodies_stay(kept: str) -> None:
    assert without_comments(kept) == kept


def test_an_unterminated_literal_keeps_the_rest() -> None:
    # The server rejects it; the text it rejects is the file's.
    assert without_comments("SELECT 'open -- text") == "SELECT 'open -- text"


def test_packaged_statements_carry_no_comment_lines() -> None:
    statement = query("inbox", "lease_events").as_string(None)
    assert statement.startswith("WITH leased AS (")
    # Under psycopg's 4096-byte limit for its cache of parsed statements.
    assert len(statement.encode()) < 4096
    assert not [line for line in statement.splitlines() if line.lstrip().startswith("--")]
