"""The registry document's validator, fuzzed field by field: whatever a document holds, parsing
it either succeeds or raises the project's ConfigurationError — never a plain ValueError,
TypeError or KeyError, which would crash ingest's request instead of keeping the last good copy
(and counting ``invalid_document``), and print a traceback from ``webhook-inbox providers``."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import providers, schemes
from webhook_inbox.ingest.provider_registry import dump_document, parse_document

VALID = {
    "format": 1,
    "providers": {
        "acme": {
            "scheme": "hmac-sha256",
            "options": {"signature_header": "X-Acme-Signature"},
            "secrets": [
                {"value": "new-secret-value-0123456789", "added_at": "2026-12-02T15:00:00Z"},
                {"value": "old-secret-value-0123456789", "expires_at": "2026-12-03T15:00:00Z"},
            ],
            "tolerance_seconds": 300,
            "public_url": "https://hooks.example.com/webhooks/acme",
        }
    },
    "history": [
        {
            "at": "2026-12-02T15:00:00Z",
            "by": "arn:aws:iam::123456789012:user/ops",
            "action": "add",
            "provider": "acme",
            "change": {"scheme": "hmac-sha256"},
        }
    ],
}

# Every place a value sits in the document, as a path of keys and indexes.
FIELDS: list[tuple[Any, ...]] = [
    ("format",),
    ("providers",),
    ("providers", "acme"),
    ("providers", "acme", "scheme"),
    ("providers", "acme", "options"),
    ("providers", "acme", "options", "signature_header"),
    ("providers", "acme", "secrets"),
    ("providers", "acme", "secrets", 0),
    ("providers", "acme", "secrets", 0, "value"),
    ("providers", "acme", "secrets", 0, "added_at"),
    ("providers", "acme", "secrets", 1, "expires_at"),
    ("providers", "acme", "tolerance_seconds"),
    ("providers", "acme", "public_url"),
    ("history",),
    ("history", 0),
    ("history", 0, "at"),
    ("history", 0, "by"),
    ("history", 0, "action"),
    ("history", 0, "provider"),
    ("history", 0, "change"),
]

# Strings that have broken URL, time and number parsers before, beside arbitrary text.
TRICKY_TEXT = st.sampled_from(
    [
        "http://[::1",
        "https://[::1]:99999/x",
        "https://host:port/",
        "http://a b/",
        "https://h/\x00",
        "2026-13-45T99:99:99Z",
        "2026-12-02T15:00:00+99:00Z",
        "9999999999-01-01T00:00:00Z",
        "T Z",
        "NaN",
        "1e309",
        "whsec_",
        "whsec_!!!!",
        "-----BEGIN PUBLIC KEY-----\nnot a key\n-----END PUBLIC KEY-----",
        "",
        "\ud800",
    ]
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | TRICKY_TEXT,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=12) | TRICKY_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)


def _replaced(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    document = copy.deepcopy(VALID)
    node: Any = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return document


def _parses_or_refuses(text: str) -> None:
    """Parsing ``text`` either refuses it or gives a document the commands can write back."""
    try:
        document = parse_document(text)
    except ConfigurationError:
        return
    # e.g. over Secrets Manager's size: refused before anything is written
    with contextlib.suppress(ConfigurationError):
        dump_document(document)


def test_the_valid_document_parses() -> None:
    assert parse_document(json.dumps(VALID)).registry is not None


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(FIELDS), value=JSON_VALUES)
def test_any_value_in_any_field_parses_or_is_a_configuration_error(
    path: tuple[Any, ...], value: Any
) -> None:
    _parses_or_refuses(json.dumps(_replaced(path, value), allow_nan=True))


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(sorted(schemes.SCHEMES)),
    options=st.dictionaries(st.text(max_size=24) | TRICKY_TEXT, JSON_VALUES, max_size=4),
    secret=JSON_VALUES,
)
def test_any_scheme_with_any_options_and_secret_parses_or_is_a_configuration_error(
    scheme: str, options: dict[str, Any], secret: Any
) -> None:
    provider = {"scheme": scheme, "options": options, "secrets": [{"value": secret}]}
    document = _replaced(("providers", "acme"), provider)
    _parses_or_refuses(json.dumps(document, allow_nan=True))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200) | TRICKY_TEXT | st.binary(max_size=60).map(repr))
def test_any_text_parses_or_is_a_configuration_error(text: str) -> None:
    _parses_or_refuses(text)


def test_an_unparseable_public_url_is_a_configuration_error_naming_the_field() -> None:
    document = _replaced(("providers", "acme", "public_url"), "http://[::1")
    with pytest.raises(ConfigurationError, match="public_url"):
        parse_document(json.dumps(document))
    # The same check guards PROVIDERS_CONFIG, which every delivery of a stack without a
    # registry parses.
    with pytest.raises(ConfigurationError, match="public_url"):
        providers.parse_config({"providers": {"acme": document["providers"]["acme"]}})
