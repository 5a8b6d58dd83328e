"""A function's settings as SAM would deploy them: template.yaml, samconfig.toml, overrides.

Parameters take, lowest first: the template's defaults, ``parameter_overrides`` from the
samconfig.toml sections ``sam local invoke`` reads (``<env>.global`` then ``<env>.local_invoke``),
then ``--parameter-overrides``. Intrinsics are evaluated over those values; whatever only a
deployed stack can name (a resource's id or attribute, a parameter without a value) becomes an
:class:`Unresolved` that says what it stood for, so the caller can ask for it by name.
"""

from __future__ import annotations

import importlib
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook_inbox.errors import ConfigurationError

ACCOUNT_ID = "123456789012"  # what sam local uses too: no account is looked up
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class Unresolved:
    """A value only a deployed stack has, e.g. ``!Ref ProcessingQueue``."""

    what: str


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    handler: str
    code_uri: str
    runtime: str
    timeout: int
    memory_mb: int
    architectures: tuple[str, ...]
    layers: tuple[str, ...]  # layer logical ids in this template, in Lambda's order
    environment: dict[str, str | Unresolved]
    log_group: str


@dataclass(frozen=True)
class LayerSpec:
    logical_id: str
    content_uri: str


@dataclass
class Template:
    body: dict[str, Any]
    path: Path
    parameters: dict[str, Any] = field(default_factory=dict)
    stack_name: str = "webhook-inbox"
    region: str = DEFAULT_REGION

    @property
    def root(self) -> Path:
        return self.path.parent

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {
            name: res
            for name, res in self.body.get("Resources", {}).items()
            if res.get("Type") == kind
        }


# --- reading -----------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    """Parse a CloudFormation/SAM template with its short tags (``!Ref``, ``!GetAtt``, …)."""
    try:  # typed as Any: PyYAML ships no type stubs
        yaml: Any = importlib.import_module("yaml")
    except ImportError:  # PyYAML comes with the [dev] extra, not with the runtime
        raise ConfigurationError(
            "invoke reads template.yaml with PyYAML: pip install -e '.[dev]'"
        ) from None

    class Loader(yaml.SafeLoader):  # type: ignore[misc]
        """Short tags become CloudFormation's long form: ``!Ref x`` -> ``{"Ref": x}``."""

    def intrinsic(loader: Any, suffix: str, node: Any) -> dict[str, Any]:
        value: Any
        if isinstance(node, yaml.ScalarNode):
            value = loader.construct_scalar(node)
            if suffix == "GetAtt":
                value = value.split(".", 1)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        return {suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}": value}

    Loader.add_multi_constructor("!", intrinsic)
    try:
        body = yaml.load(path.read_text("utf-8"), Loader=Loader)  # a SafeLoader subclass
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None
    if not isinstance(body, dict) or "Resources" not in body:
        raise ConfigurationError(f"{path} is not a SAM template (no Resources)")
    return body


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """``Key=Value`` or ``ParameterKey=Key,ParameterValue=Value`` tokens, shell-quoted."""
    parsed: dict[str, str] = {}
    for item in items:
        for token in shlex.split(item):
            if token.startswith("ParameterKey="):
                key_part, sep, value_part = token.partition(",ParameterValue=")
                if not sep:
                    raise ConfigurationError(f"parameter override {token!r} lacks ParameterValue")
                parsed[key_part.removeprefix("ParameterKey=")] = value_part
                continue
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise ConfigurationError(f"parameter override {token!r} is not Key=Value")
            parsed[key] = value
    return parsed


def samconfig_settings(path: Path, config_env: str) -> tuple[dict[str, str], str | None]:
    """(parameter overrides, stack name) from the samconfig sections ``sam local invoke`` reads."""
    if not path.is_file():
        return {}, None
    try:
        config = tomllib.loads(path.read_text("utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from None
    overrides: dict[str, str] = {}
    stack_name = None
    for command in ("global", "local_invoke"):
        section = config.get(config_env, {}).get(command, {}).get("parameters", {})
        raw = section.get("parameter_overrides")
        if raw:
            overrides.update(parse_overrides([raw] if isinstance(raw, str) else list(raw)))
        stack_name = section.get("stack_name", stack_name)
    return overrides, stack_name


def open_template(
    path: Path,
    *,
    samconfig: Path | None,
    config_env: str,
    overrides: Sequence[str],
    region: str,
) -> Template:
    body = load(path)
    declared = body.get("Parameters", {}) or {}
    from_config, stack_name = samconfig_settings(samconfig, config_env) if samconfig else ({}, None)
    given = {**from_config, **parse_overrides(overrides)}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ConfigurationError(f"parameter override for an undeclared parameter: {unknown}")
    parameters: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in given:
            parameters[name] = given[name]
        elif "Default" in spec:
            parameters[name] = spec["Default"]
        else:
            parameters[name] = Unresolved(f"parameter {name} (no default; --parameter-overrides)")
        if str(spec.get("Type", "")).startswith("List<") or spec.get("Type") == (
            "CommaDelimitedList"
        ):
            value = parameters[name]
            if isinstance(value, str):
                parameters[name] = value.split(",") if value else []
    return Template(body, path, parameters, stack_name or "webhook-inbox", region)


# --- intrinsics --------------------------------------------------------------------------


class Resolver:
    """Evaluates intrinsics over parameter values; resources become :class:`Unresolved`."""

    def __init__(self, template: Template) -> None:
        self.template = template

    def ref(self, name: str) -> Any:
        pseudo = {
            "AWS::StackName": self.template.stack_name,
            "AWS::Region": self.template.region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": None,
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.template.parameters:
            return self.template.parameters[name]
        if name in self.template.body.get("Resources", {}):
            return Unresolved(f"!Ref {name}")
        raise ConfigurationError(f"template refers to {name!r}, which it does not declare")

    def condition(self, name: str) -> bool:
        conditions = self.template.body.get("Conditions", {})
        if name not in conditions:
            raise ConfigurationError(f"template uses condition {name!r}, which it does not declare")
        value = self.resolve(conditions[name])
        if isinstance(value, Unresolved):
            raise ConfigurationError(f"condition {name} depends on {value.what}")
        return bool(value)

    def resolve(self, value: Any) -> Any:  # noqa: PLR0911, PLR0912 - one branch per intrinsic
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) != 1:
            return {k: self.resolve(v) for k, v in value.items()}
        ((key, arg),) = value.items()
        if key == "Ref":
            return self.ref(arg)
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::If":
            name, when_true, when_false = arg
            return self.resolve(when_true if self.condition(name) else when_false)
        if key in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or"):
            return self._logic(key, [self.resolve(v) for v in arg])
        if key == "Fn::GetAtt":
            return Unresolved(f"!GetAtt {'.'.join(arg) if isinstance(arg, list) else arg}")
        if key == "Fn::Join":
            separator, items = arg
            parts = self.resolve(items)
            if isinstance(parts, Unresolved):
                return parts
            return _first_unresolved(parts) or separator.join(str(p) for p in parts)
        if key == "Fn::Select":
            index, items = (self.resolve(v) for v in arg)
            return _first_unresolved([index, items]) or items[int(index)]
        if key == "Fn::Split":
            separator, text = arg
            text = self.resolve(text)
            return text if isinstance(text, Unresolved) else str(text).split(separator)
        if key == "Fn::Sub":
            return self._sub(arg)
        return Unresolved(f"{key} (not evaluated locally)")

    def _logic(self, key: str, args: list[Any]) -> Any:
        if unresolved := _first_unresolved(args):
            return unresolved
        if key == "Fn::Equals":
            return str(args[0]) == str(args[1])
        if key == "Fn::Not":
            return not args[0]
        return all(args) if key == "Fn::And" else any(args)

    def _sub(self, arg: Any) -> Any:
        text, variables = (arg, {}) if isinstance(arg, str) else arg
        local = {k: self.resolve(v) for k, v in variables.items()}
        out, start = [], 0
        while (i := text.find("${", start)) != -1:
            j = text.index("}", i)
            out.append(text[start:i])
            name = text[i + 2 : j]
            if name.startswith("!"):  # ${!Literal} is the escape for a literal ${Literal}
                value: Any = "${" + name[1:] + "}"
            elif name in local:
                value = local[name]
            elif "." in name:
                value = Unresolved(f"!GetAtt {name}")
            else:
                value = self.ref(name)
            if isinstance(value, Unresolved):
                return value
            out.append(str(value))
            start = j + 1
        out.append(text[start:])
        return "".join(out)


def _first_unresolved(values: Any) -> Unresolved | None:
    for value in values if isinstance(values, list) else [values]:
        if isinstance(value, Unresolved):
            return value
    return None


# --- a function's settings ---------------------------------------------------------------


def _merge_globals(globals_: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """SAM's Globals rules: the function's scalars win, maps merge, lists add globals first."""
    merged = dict(globals_)
    for key, value in own.items():
        base = merged.get(key)
        if isinstance(base, dict) and isinstance(value, dict) and not _is_intrinsic(value):
            merged[key] = _merge_globals(base, value)
        elif isinstance(base, list) and isinstance(value, list):
            merged[key] = base + value
        else:
            merged[key] = value
    return merged


def _is_intrinsic(value: Mapping[str, Any]) -> bool:
    return len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref", "Condition"))


def function_spec(template: Template, logical_id: str) -> FunctionSpec:
    functions = template.resources("AWS::Serverless::Function")
    if logical_id not in functions:
        known = ", ".join(sorted(functions)) or "none"
        raise ConfigurationError(f"no function {logical_id!r} in {template.path}; known: {known}")
    globals_ = template.body.get("Globals", {}).get("Function", {}) or {}
    props = _merge_globals(globals_, functions[logical_id].get("Properties", {}))
    resolver = Resolver(template)
    variables = (props.get("Environment") or {}).get("Variables") or {}
    environment: dict[str, str | Unresolved] = {}
    for name, raw in variables.items():
        value = resolver.resolve(raw)
        if value is None:  # AWS::NoValue: the variable is not set at all
            continue
        if isinstance(value, Unresolved):
            environment[name] = value
        elif isinstance(value, bool):
            environment[name] = "true" if value else "false"
        else:
            environment[name] = str(value)
    layers = []
    for layer in resolver.resolve(props.get("Layers", [])):
        if isinstance(layer, Unresolved) and layer.what.startswith("!Ref "):
            layers.append(layer.what.removeprefix("!Ref "))
        else:  # an ARN from elsewhere: nothing local to put on the path
            raise ConfigurationError(
                f"{logical_id} uses layer {layer!r}, which is not built from this template"
            )
    log_group = _log_group_name(template, resolver, props, logical_id)
    handler = resolver.resolve(props.get("Handler"))
    code_uri = resolver.resolve(props.get("CodeUri"))
    if not isinstance(handler, str) or not isinstance(code_uri, str):
        raise ConfigurationError(f"{logical_id} needs a Handler and a local CodeUri")
    return FunctionSpec(
        logical_id=logical_id,
        handler=handler,
        code_uri=code_uri,
        runtime=str(resolver.resolve(props.get("Runtime", ""))),
        timeout=int(resolver.resolve(props.get("Timeout", 3))),
        memory_mb=int(resolver.resolve(props.get("MemorySize", 128))),
        architectures=tuple(resolver.resolve(props.get("Architectures", ["x86_64"]))),
        layers=tuple(layers),
        environment=environment,
        log_group=log_group,
    )


def _log_group_name(
    template: Template, resolver: Resolver, props: Mapping[str, Any], logical_id: str
) -> str:
    """The LoggingConfig group's name when the template gives one, else Lambda's default."""
    group = (props.get("LoggingConfig") or {}).get("LogGroup")
    target = group.get("Ref") if isinstance(group, dict) else None
    if target in template.body.get("Resources", {}):
        group = template.body["Resources"][target].get("Properties", {}).get("LogGroupName")
    name = resolver.resolve(group) if group else None
    return name if isinstance(name, str) else f"/aws/lambda/{logical_id}"


def layer_spec(template: Template, logical_id: str) -> LayerSpec:
    layers = template.resources("AWS::Serverless::LayerVersion")
    if logical_id not in layers:
        raise ConfigurationError(f"layer {logical_id!r} is not an AWS::Serverless::LayerVersion")
    content_uri = Resolver(template).resolve(layers[logical_id]["Properties"].get("ContentUri"))
    if not isinstance(content_uri, str):
        raise ConfigurationError(f"layer {logical_id} needs a local ContentUri")
    return LayerSpec(logical_id, content_uri)
