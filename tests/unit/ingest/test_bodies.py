"""Delivery bodies → storable JSON: objects, event batches and forms; anything jsonb would refuse
is a 400 (InvalidPayload), never a 500."""

from __future__ import annotations

import pytest

from webhook_inbox.errors import InvalidPayload
from webhook_inbox.ingest import bodies


def test_form_fields_become_strings_and_repeated_fields_lists() -> None:
    body = b"MessageSid=SM1&To=%2B15551234567&Body=hi+there&Media=a&Media=b&Empty="
    assert bodies.parse("form", body) == {
        "MessageSid": "SM1",
        "To": "+15551234567",
        "Body": "hi there",
        "Media": ["a", "b"],
        "Empty": "",
    }
    assert bodies.form(b"") == {}


@pytest.mark.parametrize(
    "body",
    [
        b"a=%FF",  # not UTF-8 once decoded
        b"\xff=1",  # not UTF-8 at all
        b"a=%00",  # NUL: jsonb text cannot hold it
        b"a=1&&b",  # malformed pair
        b"&".join(b"f%d=1" % n for n in range(bodies.MAX_FORM_FIELDS + 1)),
    ],
)
def test_bad_forms_are_400s(body: bytes) -> None:
    with pytest.raises(InvalidPayload):
        bodies.form(body)


def test_an_event_batch_is_a_non_empty_array_of_objects() -> None:
    assert bodies.parse("json-array", b'[{"a":1},{"b":2}]') == [{"a": 1}, {"b": 2}]
    for bad in (b"[]", b'{"a":1}', b"[1,2]", b'[{"a":1},"x"]', b"[{}"):
        with pytest.raises(InvalidPayload):
            bodies.json_array(bad)


def test_json_objects_keep_the_jsonb_guards() -> None:
    assert bodies.parse("json", b'{"a":[1,2]}') == {"a": [1, 2]}
    for bad in (
        b"[1]",
        b'{"a":"\\u0000"}',
        b'{"a":1e999}',
        b'{"a":' * 70 + b"1" + b"}" * 70,
        b"\xff",
    ):
        with pytest.raises(InvalidPayload):
            bodies.json_object(bad)


def test_an_unknown_format_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown body format"):
        bodies.parse("xml", b"<a/>")
