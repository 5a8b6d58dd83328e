"""Delivery bodies → the JSON values stored in ``webhook_events.payload`` (jsonb), else 400.

Three formats, named by each scheme's ``body_format``: ``json`` (one object, what most senders
post), ``json-array`` (a batch of event objects: SendGrid, HubSpot) and ``form``
(``application/x-www-form-urlencoded``: Twilio; stored as an object of strings, a repeated field
as a list of strings). Each refuses what jsonb would refuse (NUL, lone surrogates, non-finite
numbers) and trees deeper than :data:`MAX_JSON_DEPTH`, so a bad body is a 400, never a 500.
"""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import parse_qsl

from webhook_inbox.errors import InvalidPayload

MAX_JSON_DEPTH = 64
MAX_FORM_FIELDS = 1000

# What parsing a body costs ingest's memory, measured by ``python -m bench.ingest_memory``: about
# 40 MB of peak RSS before any body, and 61 MB more per MiB of the costliest JSON shape for
# Python (arrays of small objects), rounded up. A body that cannot fit would not be refused: the
# function would be killed for memory at every retry of its sender, leaving no line.
BASE_MB = 40
MB_PER_BODY_MIB = 64
HEADROOM_MB = 16
MIB = 1024 * 1024


def memory_body_limit(memory_mb: int) -> int:
    """The largest body (bytes) a function of ``memory_mb`` can parse."""
    return max(memory_mb - BASE_MB - HEADROOM_MB, 0) * MIB // MB_PER_BODY_MIB


def body_limit(max_body_bytes: int, memory_mb: int) -> tuple[int, str]:
    """The body limit to enforce and the 413's detail: MaxBodyBytes, or less where the function's
    memory (0: unknown, outside Lambda) cannot parse that much; the detail says what to raise."""
    memory_limit = memory_body_limit(memory_mb)
    if not memory_mb or memory_limit >= max_body_bytes:
        return max_body_bytes, "body over the limit"
    return memory_limit, (
        f"body over what IngestMemorySize {memory_mb} MB can parse ({memory_limit} bytes, under"
        f" MaxBodyBytes {max_body_bytes}): raise IngestMemorySize"
    )


def parse(body_format: str, body: bytes) -> Any:
    if body_format == "json":
        return json_object(body)
    if body_format == "json-array":
        return json_array(body)
    if body_format == "form":
        return form(body)
    raise ValueError(f"unknown body format {body_format!r}")


def json_object(body: bytes) -> dict[str, Any]:
    payload = json_value(body)
    if not isinstance(payload, dict):
        raise InvalidPayload("JSON body must be an object")
    return payload


def json_array(body: bytes) -> list[dict[str, Any]]:
    """A non-empty JSON array of objects (one per event)."""
    payload = json_value(body)
    if not isinstance(payload, list) or not payload:
        raise InvalidPayload("JSON body must be a non-empty array of events")
    if not all(isinstance(item, dict) for item in payload):
        raise InvalidPayload("every event in the JSON array must be an object")
    return payload


def json_value(body: bytes) -> Any:
    """Any JSON value that PostgreSQL's jsonb accepts, from strict UTF-8."""
    text = _text(body)
    try:
        payload = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise InvalidPayload("JSON nested too deeply") from None
    except ValueError:
        raise InvalidPayload("body is not valid JSON") from None
    # Cheap guards first: without enough brackets the tree cannot be deep, and without a \u
    # escape no string can hold NUL or a lone surrogate (strict UTF-8 and JSON exclude them).
    deep_possible = body.count(b"{") + body.count(b"[") > MAX_JSON_DEPTH
    escapes = b"\\u" in body
    if deep_possible or escapes:
        _check_tree(payload, check_strings=escapes)
    return payload


def form(body: bytes) -> dict[str, str | list[str]]:
    """A form-encoded body as an object: one field → a string, a repeated field → a list."""
    try:
        pairs = parse_qsl(
            _text(body),
            keep_blank_values=True,
            strict_parsing=bool(body),
            errors="strict",
            max_num_fields=MAX_FORM_FIELDS,
        )
    except UnicodeDecodeError:
        raise InvalidPayload("form field is not UTF-8 once percent-decoded") from None
    except ValueError:
        raise InvalidPayload("body is not a valid form") from None
    fields: dict[str, str | list[str]] = {}
    for name, value in pairs:
        if _bad_string(name) or _bad_string(value):
            raise InvalidPayload("form field holds NUL or a lone surrogate")
        previous = fields.get(name)
        if previous is None:
            fields[name] = value
        elif isinstance(previous, list):
            previous.append(value)
        else:
            fields[name] = [previous, value]
    return fields


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")  # strict: json.loads(bytes) would guess UTF-16/32
    except UnicodeDecodeError:
        raise InvalidPayload("body is not UTF-8") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: jsonb has no infinity
        raise ValueError("number out of range")
    return value


def _bad_string(value: str) -> bool:
    if "\x00" in value:
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_tree(payload: Any, *, check_strings: bool) -> None:
    """Depth, and strings PostgreSQL's jsonb rejects (NUL, lone surrogates)."""
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_JSON_DEPTH:
                raise InvalidPayload(f"JSON nested deeper than {MAX_JSON_DEPTH}")
            for key, value in node.items():
                if check_strings and _bad_string(key):
                    raise InvalidPayload("JSON string holds NUL or a lone surrogate")
                stack.append((value, depth + 1))
        elif isinstance(node, list):
            if depth > MAX_JSON_DEPTH:
                raise InvalidPayload(f"JSON nested deeper than {MAX_JSON_DEPTH}")
            stack.extend((value, depth + 1) for value in node)
        elif isinstance(node, str) and check_strings and _bad_string(node):
            raise InvalidPayload("JSON string holds NUL or a lone surrogate")
