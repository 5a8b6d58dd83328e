import pytest

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.store.queries import parse, query


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
