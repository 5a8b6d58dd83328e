"""Checks sample bodies against a provider SDK's own types, in a process of its own.

Run by :mod:`tests.sample_sources` as ``python tests/sample_oracle.py SDK ROOT`` with the SDK's
pinned wheel (unpacked in ROOT) first on the path, so the types checked are that release's,
never the virtualenv's copy. Reads ``{event type: body}`` as JSON on stdin and writes
``{event type: [problems]}`` on stdout (an empty list: the body matches).

Each field a body carries must be one the SDK declares for that object, with a value of the
declared type, at every depth the SDK types (a field the SDK leaves untyped is not looked into).
Fields the body leaves out are not reported: the samples are abbreviated, except where the SDK
itself requires them (Paddle's ``from_dict``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import datetime
import enum
import importlib
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Problems = list[str]


class Walker:
    """A JSON value against a Python annotation, as the SDK declares it."""

    def __init__(self, resolve: Callable[[str], Any]) -> None:
        self.resolve = resolve

    def check(self, value: Any, annotation: Any, path: str) -> Problems:  # noqa: PLR0911 - one return per kind of annotation
        annotation = self._concrete(annotation)
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if annotation is Any or annotation is object:
            return []
        if annotation is type(None):
            return [] if value is None else [f"{path}: {_show(value)} is not null"]
        if origin in (typing.Union, types.UnionType):
            return self._union(value, args, path)
        if origin is typing.Literal:
            return [] if value in args else [f"{path}: {_show(value)} is not one of {list(args)}"]
        if origin is typing.Annotated:
            return self.check(value, args[0], path)
        if origin in (list, Sequence, typing.List):  # noqa: UP006 - the SDKs' own spelling
            if not isinstance(value, list):
                return [f"{path}: {_show(value)} is not an array"]
            return [
                p for i, item in enumerate(value) for p in self.check(item, args[0], f"{path}.{i}")
            ]
        if origin in (dict, Mapping, typing.Dict):  # noqa: UP006
            if not isinstance(value, dict):
                return [f"{path}: {_show(value)} is not an object"]
            return [p for k, v in value.items() for p in self.check(v, args[-1], f"{path}.{k}")]
        return self._scalar_or_object(value, annotation, origin, args, path)

    def _concrete(self, annotation: Any) -> Any:
        if isinstance(annotation, typing.ForwardRef):
            annotation = annotation.__forward_arg__
        if isinstance(annotation, str):
            annotation = self.resolve(annotation)
        return annotation

    def _union(self, value: Any, arms: Sequence[Any], path: str) -> Problems:
        """Fits one arm; else the problems of the closest arm of the value's own kind (an
        object's misspelt field, not "is not null")."""
        best: tuple[bool, int, Problems] | None = None
        for arm in arms:
            found = self.check(value, arm, path)
            if not found:
                return []
            rank = (not _same_kind(value, self._concrete(arm)), len(found), found)
            if best is None or rank[:2] < best[:2]:
                best = rank
        return best[2] if best else []

    def _scalar_or_object(  # noqa: PLR0911 - one return per kind of annotation
        self, value: Any, annotation: Any, origin: Any, args: Sequence[Any], path: str
    ) -> Problems:
        plain = {str: str, int: int, float: (int, float), bool: bool}
        if annotation in plain:
            ok = isinstance(value, plain[annotation]) and (
                annotation is bool or not isinstance(value, bool)
            )
            return [] if ok else [f"{path}: {_show(value)} is not {annotation.__name__}"]
        if annotation is datetime.datetime:
            try:
                datetime.datetime.fromisoformat(value)
            except (TypeError, ValueError):
                return [f"{path}: {_show(value)} is not an ISO 8601 date-time"]
            return []
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            known = {member.value for member in annotation}
            return (
                [] if value in known else [f"{path}: {_show(value)} is not one of {sorted(known)}"]
            )
        if isinstance(annotation, type) and hasattr(annotation, "is_known"):  # PaddleStrEnum
            return [] if annotation(value).is_known() else [f"{path}: {_show(value)} is not known"]
        special = SPECIAL.get(getattr(origin or annotation, "__name__", ""))
        if special is not None:
            return special(self, value, args, path)
        fields = declared_fields(annotation)
        if fields is None:
            return []  # a type the SDK does not describe field by field
        if not isinstance(value, dict):
            return [f"{path}: {_show(value)} is not an object ({annotation.__name__})"]
        return self.fields(value, fields, path, annotation.__name__)

    def fields(
        self, value: Mapping[str, Any], fields: Mapping[str, Any], path: str, name: str
    ) -> Problems:
        found: Problems = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key not in fields:
                found.append(f"{where}: not a field of {name}")
            else:
                found += self.check(item, fields[key], where)
        return found


def _same_kind(value: Any, annotation: Any) -> bool:
    """Whether a JSON value and an annotation are of one kind: null, array, object or scalar."""
    origin = typing.get_origin(annotation) or annotation
    if annotation is type(None):
        return value is None
    if origin in (list, Sequence, typing.List):  # noqa: UP006
        return isinstance(value, list)
    if annotation in (str, int, float, bool) or origin is typing.Literal:
        return value is not None and not isinstance(value, dict | list)
    return isinstance(value, dict)


def _show(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _stripe_list(walker: Walker, value: Any, args: Sequence[Any], path: str) -> Problems:
    if not isinstance(value, dict) or value.get("object") != "list":
        return [f"{path}: not a Stripe list object"]
    extra = set(value) - {"object", "data", "has_more", "url", "total_count"}
    found = [f"{path}.{key}: not a field of a list" for key in sorted(extra)]
    return found + walker.check(value.get("data"), list[args[0]], f"{path}.data")


def _stripe_untyped(walker: Walker, value: Any, args: Sequence[Any], path: str) -> Problems:
    return walker.check(value, dict[str, args[0] if args else Any], path)


def _free_form(walker: Walker, value: Any, args: Sequence[Any], path: str) -> Problems:
    return [] if isinstance(value, dict) else [f"{path}: {_show(value)} is not an object"]


SPECIAL: dict[str, Callable[[Walker, Any, Sequence[Any], str], Problems]] = {
    "ListObject": _stripe_list,
    "SearchResultObject": _stripe_list,
    "UntypedStripeObject": _stripe_untyped,
    "CustomData": _free_form,  # Paddle: your own keys
}


def declared_fields(cls: Any) -> dict[str, Any] | None:
    """The JSON field names ``cls`` declares and their annotations; None if it declares none."""
    if not isinstance(cls, type):
        return None
    if hasattr(cls, "model_fields"):  # pydantic (Square)
        return {(f.alias or name): f.annotation for name, f in cls.model_fields.items()}
    if dataclasses.is_dataclass(cls):  # Paddle: snake_case in JSON (its lineItems is line_items)
        hints = typing.get_type_hints(cls)
        return {_snake(f.name): hints[f.name] for f in dataclasses.fields(cls)}
    if any(base.__name__ == "StripeObject" for base in cls.__mro__):
        found: dict[str, Any] = {}
        for base in reversed(cls.__mro__):
            found.update(getattr(base, "__annotations__", {}))
        remap = getattr(cls, "_field_remappings", {}) or {}
        return {
            remap.get(name, name): annotation
            for name, annotation in found.items()
            if not name.startswith("_")
            and name != "OBJECT_NAME"
            and typing.get_origin(annotation) is not typing.ClassVar
        }
    return None


def _stripe(samples: Mapping[str, Any]) -> dict[str, Problems]:
    import stripe
    from stripe._object_classes import OBJECT_CLASSES, get_object_class

    by_name: dict[str, list[Any]] = {}
    for module, name in OBJECT_CLASSES.values():
        by_name.setdefault(name, []).append(getattr(importlib.import_module(module), name))

    def resolve(name: str) -> Any:
        """A forward reference: a name stripe exports, else the one class of that name."""
        node: Any = stripe
        try:
            for part in name.split("."):
                node = getattr(node, part)
        except AttributeError:
            found = by_name.get(name.rpartition(".")[2], [])
            return found[0] if len(found) == 1 else Any  # ambiguous: not looked into
        return node

    walker = Walker(resolve)
    event_fields = declared_fields(stripe.Event) or {}
    results = {}
    for event_type, body in samples.items():
        found = walker.fields(body, event_fields, "", "Event")
        if body.get("api_version") != stripe.api_version:
            found.append(
                f"api_version: {body.get('api_version')!r}, the SDK's is {stripe.api_version}"
            )
        data = body.get("data", {})
        kind = get_object_class(api_mode="V1", object_name=data.get("object", {}).get("object"))
        if kind is None or kind is stripe.StripeObject:
            found.append("data.object.object: not an object the SDK knows")
        else:
            fields = declared_fields(kind) or {}
            found += walker.fields(data["object"], fields, "data.object", kind.__name__)
            found += walker.fields(
                data.get("previous_attributes") or {},
                fields,
                "data.previous_attributes",
                kind.__name__,
            )
        results[event_type] = found
    return results


def _square(samples: Mapping[str, Any]) -> dict[str, Problems]:
    import pydantic

    results = {}
    for event_type, body in samples.items():
        module = importlib.import_module(f"square.types.{event_type.replace('.', '_')}_event")
        (model,) = [
            value
            for name, value in vars(module).items()
            if name.endswith("Event")
            and isinstance(value, type)
            and issubclass(value, pydantic.BaseModel)
            and value.__module__ == module.__name__
        ]
        walker = Walker(lambda name, m=module: getattr(m, name))
        results[event_type] = walker.check(body, model, "")
    return results


def _paddle(samples: Mapping[str, Any]) -> dict[str, Problems]:
    from paddle_billing.Entities.Events import EventTypeName
    from paddle_billing.Notifications.Entities.Entity import Entity

    walker = Walker(lambda name: None)
    top = {"event_id": str, "event_type": str, "occurred_at": datetime.datetime,
           "notification_id": str, "data": Any}  # fmt: skip
    results = {}
    for event_type, body in samples.items():
        found = walker.fields(body, top, "", "a notification")
        if not EventTypeName(event_type).is_known():
            found.append(f"{event_type}: not an event type the SDK knows")
        name = Entity._resolve_event_class_name(event_type)
        module = importlib.import_module(f"paddle_billing.Notifications.Entities.{name}")
        entity = getattr(module, name)
        try:
            entity.from_dict(body["data"])
        except Exception as exc:  # noqa: BLE001 - whatever the SDK's parser raises is the finding
            found.append(f"data: {name}.from_dict raised {type(exc).__name__}: {exc}")
        found += walker.check(body["data"], entity, "data")
        results[event_type] = found
    return results


def _enum_values(module: str, attribute: str) -> list[str]:
    owner: Any = importlib.import_module(module)
    for part in attribute.split("."):
        owner = getattr(owner, part)
    return sorted(v for k, v in vars(owner).items() if not k.startswith("_") and isinstance(v, str))


def _twilio(samples: Mapping[str, Any]) -> dict[str, Problems]:
    """Twilio documents no payload schema; its SDK names each resource's statuses, which are the
    second half of the types this project gives form deliveries (``message.delivered``)."""
    base = "twilio.rest.api.v2010.account"
    statuses = {
        "message": _enum_values(f"{base}.message", "MessageInstance.Status"),
        "call": _enum_values(f"{base}.call", "CallInstance.Status"),
        "recording": _enum_values(f"{base}.recording", "RecordingInstance.Status"),
    }
    results = {}
    for event_type in samples:
        kind, _, status = event_type.partition(".")
        known = statuses.get(kind, [])
        found = [] if status in known else [f"{status!r} is not a {kind} status: {known}"]
        results[event_type] = found
    return results


def _hubspot(samples: Mapping[str, Any]) -> dict[str, Problems]:
    """HubSpot's SDK lists the subscription types a webhook subscription may name."""
    from hubspot.webhooks.models import SubscriptionCreateRequest

    setter = textwrap.dedent(inspect.getsource(SubscriptionCreateRequest.event_type.fset))
    (known,) = [
        ast.literal_eval(node.value)
        for node in ast.walk(ast.parse(setter))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "allowed_values" for t in node.targets)
    ]
    return {
        event_type: [] if event_type in known else [f"{event_type!r} is not a subscription type"]
        for event_type in samples
    }


ORACLES: dict[str, tuple[str, Callable[[Mapping[str, Any]], dict[str, Problems]]]] = {
    "stripe": ("stripe", _stripe),
    "squareup": ("square", _square),
    "paddle-python-sdk": ("paddle_billing", _paddle),
    "twilio": ("twilio", _twilio),
    "hubspot-api-client": ("hubspot", _hubspot),
}


def main() -> None:
    sdk, root = sys.argv[1], sys.argv[2]
    package, oracle = ORACLES[sdk]
    samples = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # an SDK that prints must not corrupt the answer
        imported = importlib.import_module(package)
        if not str(imported.__file__).startswith(root):
            raise SystemExit(f"{package} was imported from {imported.__file__}, not from {root}")
        results = oracle(samples)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
