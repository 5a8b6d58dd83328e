"""The functions' log lines: an INFO line leaves ``level`` out (Lambda reads a line without one as
INFO), every other level keeps it, so Lambda's log-level filter and the runbook's queries see
each line at its own level."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from webhook_inbox import observability


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    logger = observability.lean_logger()
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    previous = handler.setStream(buffer)
    yield buffer
    handler.setStream(previous)


def test_an_info_line_has_no_level_and_the_others_keep_theirs(lines: io.StringIO) -> None:
    logger = observability.lean_logger()
    logger.info("accepted", extra={"provider": "stripe"})
    logger.warning("rejected", extra={"provider": "stripe"})
    logger.error("unavailable", extra={"provider": "stripe"})
    info, warning, error = (json.loads(line) for line in lines.getvalue().splitlines())
    assert "level" not in info
    assert set(info) == {"message", "timestamp", "provider"}
    assert (warning["level"], error["level"]) == ("WARNING", "ERROR")
    assert info["timestamp"].endswith("Z")  # Lambda's filter needs a valid RFC 3339 timestamp


@pytest.mark.parametrize(
    "message",
    [
        "batch",
        "fast pass rolled back",
        "true",
        "true story",
        "null",
        "NaN",
        "Infinity ",
        "é",
        '{"a": 1}',
        "[1, 2]",
        "123",
        "-Infinity",
        " true",
        "",
        "{not json",
    ],
)
def test_a_message_is_read_as_json_exactly_when_powertools_would(message: str) -> None:
    # Powertools logs a message that json.loads reads as what it holds, any other as text (it
    # keeps the message when the parse raises); the lean logger skips the failing parse of a
    # plain word, with the same result.
    try:
        expected = json.dumps(json.loads(message))
    except ValueError:
        expected = json.dumps(message)
    try:
        got = json.dumps(observability._message_as_json(message))
    except ValueError:
        got = json.dumps(message)
    assert got == expected


def test_a_word_is_logged_as_text(lines: io.StringIO) -> None:
    observability.lean_logger().warning("batch abandoned")
    assert json.loads(lines.getvalue())["message"] == "batch abandoned"
