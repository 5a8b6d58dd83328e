"""Field lists from providers' TypeScript declarations, for checking sample bodies.

Two packages describe their payloads only as TypeScript: Slack's ``@slack/types`` (one interface
per Events API event, told apart by its ``type`` literal) and Linear's ``@linear/sdk`` (types
generated from its GraphQL schema, ``IssueWebhookPayload`` and the like). Both are generated or
written to a strict layout, one field a line, which is all that is read here: no TypeScript
toolchain is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_FIELD = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<optional>\?)?:\s*(?P<type>.*?);?$")
_SLACK_TYPE = re.compile(r"^type: '([a-z_]+)';$")


@dataclass
class Shape:
    """An object type: its fields' TypeScript types, and which fields it requires."""

    name: str
    fields: dict[str, str] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    literal_type: str | None = None  # Slack: the value of its `type` field


def _blocks(text: str, opener: re.Pattern[str]) -> list[tuple[str, list[str]]]:
    """Each declaration ``opener`` matches, with its lines at nesting depth one (a nested
    object's own fields are skipped; the line that opens it is kept)."""
    found = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = opener.match(lines[index])
        index += 1
        if not match:
            continue
        depth, own = 1, []
        while index < len(lines) and depth > 0:
            line = lines[index].strip()
            index += 1
            if depth == 1 and line and not line.startswith(("/*", "*", "//", "}")):
                own.append(line)
            depth += line.count("{") - line.count("}")
        found.append((match.group(1), own))
    return found


def _shape(name: str, lines: list[str]) -> Shape:
    shape = Shape(name)
    for line in lines:
        literal = _SLACK_TYPE.match(line)
        if literal:
            shape.literal_type = literal.group(1)
        match = _FIELD.match(line)
        if match is None:
            continue
        shape.fields[match["name"]] = match["type"]
        if not match["optional"] and match["type"] != "undefined":  # `x: undefined`: absent
            shape.required.add(match["name"])
    return shape


def slack_events(text: str) -> dict[str, list[Shape]]:
    """@slack/types' events: {event type: the interfaces with that ``type`` literal}."""
    found: dict[str, list[Shape]] = {}
    opener = re.compile(r"^export interface (\w+) \{$")
    for name, lines in _blocks(text, opener):
        shape = _shape(name, lines)
        if shape.literal_type is not None:
            found.setdefault(shape.literal_type, []).append(shape)
    return found


def check_slack_event(event: dict[str, Any], shapes: list[Shape]) -> list[str]:
    """Problems of ``event`` against the closest interface of its type (top-level fields:
    each must be declared, and each required one present)."""
    best: list[str] | None = None
    for shape in shapes:
        problems = [
            f"event.{key}: not a field of {shape.name}" for key in event if key not in shape.fields
        ]
        problems += [
            f"event.{key}: required by {shape.name}" for key in sorted(shape.required - set(event))
        ]
        if best is None or len(problems) < len(best):
            best = problems
    return best if best is not None else ["no interface declares this event type"]


# Linear: GraphQL scalars as the SDK names them, in JSON Schema.
_SCALARS = {
    "String": {"type": "string"},
    "ID": {"type": "string"},
    "DateTime": {"type": "string"},
    "TimelessDate": {"type": "string"},
    "Float": {"type": "number"},
    "Int": {"type": "integer"},
    "Boolean": {"type": "boolean"},
    # Linear sends some JSONObject fields as arrays (reactionData: []).
    "JSONObject": {"type": ["object", "array"]},
    "JSON": {},
}


def linear_types(text: str) -> dict[str, Shape]:
    """Every ``type Name = { ... }`` of @linear/sdk's declarations."""
    opener = re.compile(r"^type (\w+) = \{$")
    return {name: _shape(name, lines) for name, lines in _blocks(text, opener)}


def linear_unions(text: str) -> dict[str, list[str]]:
    """``type Name = A | B | C;`` declarations (a payload whose ``data`` is one of several)."""
    found = {}
    for match in re.finditer(r"^type (\w+) = ((?:\w+ \| )+\w+);$", text, re.MULTILINE):
        found[match.group(1)] = match.group(2).split(" | ")
    return found


def linear_schema(types: dict[str, Shape], unions: dict[str, list[str]]) -> dict[str, Any]:
    """A JSON Schema document with one definition per object type: every declared field with
    its type, the required ones required, no others allowed."""
    definitions: dict[str, Any] = {}
    for name, shape in types.items():
        definitions[name] = {
            "type": "object",
            "properties": {
                key: _linear_type(value, types, unions)
                for key, value in shape.fields.items()
                if key != "__typename"
            },
            "required": sorted(shape.required - {"__typename"}),
            "additionalProperties": False,
        }
    for name, members in unions.items():
        definitions[name] = {
            "anyOf": [{"$ref": f"#/definitions/{m}"} for m in members if m in types]
        }
    return {"definitions": definitions}


def _linear_type(text: str, types: dict[str, Shape], unions: dict[str, list[str]]) -> Any:
    text = text.strip()
    maybe = re.fullmatch(r"Maybe<(.*)>", text)
    if maybe:
        return {"anyOf": [_linear_type(maybe.group(1), types, unions), {"type": "null"}]}
    array = re.fullmatch(r"Array<(.*)>", text)
    if array:
        return {"type": "array", "items": _linear_type(array.group(1), types, unions)}
    scalar = re.fullmatch(r'Scalars\["(\w+)"\]', text)
    if scalar:
        return _SCALARS.get(scalar.group(1), {})
    if text in types or text in unions:
        return {"$ref": f"#/definitions/{text}"}
    return {}  # an enum or a type this reader does not follow: any value
