"""Read template.yaml and scan the code, so infra tests compare facts instead of restating them.

- :func:`load_template` parses the SAM template with CloudFormation's short tags (``!Ref``…).
- :func:`resolve` evaluates intrinsic functions for a chosen set of parameter values.
- :func:`translated_template` is the template as ``sam deploy`` hands it to CloudFormation (SAM's
  own translator, offline); :func:`dangling_references` lists what a chosen deployment of either
  would refer to without creating it.
- :func:`module_closure` follows a function's imports through the ``webhook_inbox`` package
  (deferred imports inside functions included), which is the code that function can run.
- :func:`settings_variables` reads the settings classes that code names (all of them live in
  ``webhook_inbox.settings``; their fields name the environment variables);
  :func:`string_constants`, :func:`boto3_usage` scan its AST.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook_inbox import config

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_PATH = ROOT / "template.yaml"
PACKAGE_DIR = ROOT / "layers" / "shared" / "webhook_inbox"
SETTINGS_MODULE = PACKAGE_DIR / "settings.py"


# --- the template ------------------------------------------------------------------------


class _CfnLoader(yaml.SafeLoader):
    """YAML loader turning ``!Ref x`` into ``{"Ref": x}``, ``!GetAtt a.b`` into ``Fn::GetAtt``."""


def _construct_intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    key = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"
    return {key: value}


_CfnLoader.add_multi_constructor("!", _construct_intrinsic)


# What encrypts with the stack's key names it this way: the key with EncryptionKey=customer-managed
# (the default), nothing (the service's own encryption) with aws-managed.
STACK_KEY_OR_NONE = {
    "Fn::If": ["UseAppKey", {"Fn::GetAtt": ["AppKey", "Arn"]}, {"Ref": "AWS::NoValue"}]
}


@functools.cache
def load_template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(TEMPLATE_PATH.read_text(), Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    return loaded


@functools.cache
def translated_template(**parameter_overrides: str) -> dict[str, Any]:
    """template.yaml translated by SAM (the AWS::Serverless-2016-10-31 transform), as CloudFormation
    receives it, for the defaults or the given parameter values. Local code paths stand in for
    the S3 locations ``sam package`` would upload."""
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    template = copy.deepcopy(load_template())
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if isinstance(properties.get(key), str):
                properties[key] = f"s3://bucket/{properties[key].strip('/')}"
    translator = Translator(None, Parser(), boto_session=boto3.Session(region_name="us-east-1"))
    translated: dict[str, Any] = translator.translate(
        template, parameter_values=dict(parameter_overrides), get_managed_policy_map=lambda: {}
    )
    return translated


@dataclass(frozen=True)
class MetricFilter:
    """One AWS::Logs::MetricFilter transformation: which log group's lines it counts, and how."""

    name: str  # the resource
    log_group: str  # the log group resource it is attached to
    pattern: str
    namespace: str
    metric: str
    dimensions: Mapping[str, str]  # dimension name -> the line's field ($.x)
    value: float = 1.0  # MetricValue: a constant in every filter of the template

    def matches(self, line: Mapping[str, Any]) -> bool:
        return filter_pattern_matches(self.pattern, line)

    def dimension_values(self, line: Mapping[str, Any]) -> dict[str, Any]:
        return {key: line.get(field.removeprefix("$.")) for key, field in self.dimensions.items()}


def metric_filters(deployed_with: Mapping[str, str] | None = None) -> list[MetricFilter]:
    """Every metric filter of the template; with ``deployed_with`` (parameter overrides, ``{}``
    for the defaults) only those a stack deployed so has: one whose Condition is false there
    does not exist (the no-delivery alarm's, off by default)."""
    resolver = None
    if deployed_with is not None:
        resolver = Resolver(parameter_values(**deployed_with), Placeholders())
    found = []
    for name, res in resources_of_type("AWS::Logs::MetricFilter").items():
        if resolver and "Condition" in res and not resolver.condition(res["Condition"]):
            continue
        props = res["Properties"]
        for transformation in props["MetricTransformations"]:
            found.append(
                MetricFilter(
                    name=name,
                    log_group=props["LogGroupName"]["Ref"],
                    pattern=props["FilterPattern"],
                    namespace=transformation["MetricNamespace"],
                    metric=transformation["MetricName"],
                    dimensions={d["Key"]: d["Value"] for d in transformation.get("Dimensions", [])},
                    value=float(transformation["MetricValue"]),
                )
            )
    return found


_TERM = re.compile(
    r"^\$\.(?P<field>[A-Za-z_][A-Za-z0-9_]*)\s*"
    r'(?:=\s*"(?P<text>[^"]*)"|IS\s+(?P<constant>TRUE|FALSE))$'
)


def filter_pattern_matches(pattern: str, line: Mapping[str, Any]) -> bool:
    """CloudWatch Logs' JSON filter pattern semantics for the subset the template uses:
    ``{ $.field = "text" && $.flag IS TRUE && $.other = "*" }`` (``"*"``: the field is there,
    whatever its value), and alternatives of those joined by ``||`` (no parentheses: ``&&``
    binds tighter). Anything else raises, so a new pattern needs this evaluator (and its test)
    to learn it first."""
    body = pattern.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"not a JSON filter pattern: {pattern!r}")
    if "(" in body:
        raise ValueError(f"unsupported parentheses in {pattern!r}")
    return any(
        all(_term_matches(term.strip(), pattern, line) for term in group.split("&&"))
        for group in body[1:-1].split("||")
    )


def _term_matches(term: str, pattern: str, line: Mapping[str, Any]) -> bool:
    match = _TERM.match(term)
    if match is None:
        raise ValueError(f"unsupported term {term!r} in {pattern!r}")
    value = line.get(match["field"])
    if match["constant"] is not None:
        return value is (match["constant"] == "TRUE")
    if match["text"] == "*":
        return value is not None
    return bool(value == match["text"])


def resources_of_type(kind: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in load_template()["Resources"].items() if res["Type"] == kind}


def serverless_functions() -> dict[str, dict[str, Any]]:
    """Each AWS::Serverless::Function's properties with the template's Globals merged in."""
    template = load_template()
    globals_ = template.get("Globals", {}).get("Function", {})
    merged = {}
    for name, res in resources_of_type("AWS::Serverless::Function").items():
        props = dict(globals_)
        props.update(res["Properties"])
        # SAM appends a function's Layers to the Globals' list instead of replacing it.
        props["Layers"] = [*globals_.get("Layers", []), *res["Properties"].get("Layers", [])]
        own_env = res["Properties"].get("Environment", {})
        if is_intrinsic(own_env):  # `!Ref AWS::NoValue` replaces the Globals' environment
            env = {}
        else:
            env = dict(globals_.get("Environment", {}).get("Variables", {}))
            env.update(own_env.get("Variables", {}))
        props["Environment"] = {"Variables": env}
        merged[name] = props
    return merged


def is_intrinsic(value: Any) -> bool:
    """``{"Ref": …}`` or ``{"Fn::…": …}``: SAM lets such a value replace the Globals' whole."""
    return (
        isinstance(value, dict)
        and len(value) == 1
        and next(iter(value)).startswith(("Ref", "Fn::", "Condition"))
    )


def runs_in_the_vpc(props: Mapping[str, Any]) -> bool:
    """Whether the function keeps the Globals' VpcConfig (not replaced by ``AWS::NoValue``)."""
    return props.get("VpcConfig") not in (None, {"Ref": "AWS::NoValue"})


# Read by every function (webhook_inbox.network, through its AWS clients) but set by the
# Globals only: a function outside the VPC is not in the stack's own network, and unset is the
# right value there.
VPC_ONLY_ENV = {"NETWORK_IP_FAMILY"}


def unset_by_design(props: Mapping[str, Any]) -> set[str]:
    """The variables a function may read without the template setting them, given where it runs."""
    return set() if runs_in_the_vpc(props) else VPC_ONLY_ENV


def function_dir(props: Mapping[str, Any]) -> Path:
    return ROOT / str(props["CodeUri"]).rstrip("/")


def function_entry(props: Mapping[str, Any]) -> tuple[Path, str]:
    """(path of the handler's module, handler attribute) as the Lambda runtime resolves them."""
    module, attribute = str(props["Handler"]).rsplit(".", 1)
    return function_dir(props) / (module.replace(".", "/") + ".py"), attribute


def parameter_defaults() -> dict[str, Any]:
    return {
        name: spec.get("Default") for name, spec in load_template().get("Parameters", {}).items()
    }


def parameter_values(**overrides: str) -> dict[str, Any]:
    """Every parameter's value as CloudFormation passes it (defaults, then ``overrides``):
    list-typed parameters become lists, split on commas as CloudFormation splits them."""
    values: dict[str, Any] = {}
    for name, spec in load_template().get("Parameters", {}).items():
        raw = overrides.get(name, spec.get("Default"))
        if str(spec["Type"]).startswith(("List<", "CommaDelimitedList")) and raw is not None:
            values[name] = str(raw).split(",")
        else:
            values[name] = raw
    return values


def rule_failures(resolver: Resolver) -> list[str]:
    """AssertDescription of each Rules assertion that fails for the resolver's parameters:
    what CloudFormation would refuse the deploy with, before creating anything."""
    failures = []
    for rule in load_template().get("Rules", {}).values():
        if "RuleCondition" in rule and not resolver.resolve(rule["RuleCondition"]):
            continue
        for assertion in rule["Assertions"]:
            if not resolver.resolve(assertion["Assert"]):
                failures.append(" ".join(str(assertion["AssertDescription"]).split()))
    return failures


class Placeholders(dict[str, str]):
    """Every resource's Ref and GetAtt reads as ``<Name>`` / ``<Name.Attribute>``."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


@dataclass
class Resolver:
    """Evaluates intrinsics for given parameter values; resource refs come from ``refs``."""

    parameters: Mapping[str, Any]
    refs: Mapping[str, Any]
    stack_name: str = "webhook-inbox"
    region: str = "us-east-1"
    account: str = "123456789012"

    def pseudo(self, name: str) -> Any:
        return {
            "AWS::StackName": self.stack_name,
            "AWS::StackId": (
                f"arn:aws:cloudformation:{self.region}:{self.account}:stack/{self.stack_name}/"
                "5f3a2c40-3d1e-11f0-9a2b-0e1f2a3b4c5d"
            ),
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": None,
        }[name]

    def ref(self, name: str) -> Any:
        if name.startswith("AWS::"):
            return self.pseudo(name)
        if name in self.parameters:
            return self.parameters[name]
        if name in self.refs:
            return self.refs[name]
        raise KeyError(f"no test value for !Ref {name}")

    def condition(self, name: str) -> bool:
        return bool(self.resolve(load_template()["Conditions"][name]))

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
        if key == "Fn::Equals":
            left, right = (self.resolve(v) for v in arg)
            return str(left) == str(right)
        if key == "Fn::Not":
            return not self.resolve(arg[0])
        if key == "Fn::And":
            return all(self.resolve(v) for v in arg)
        if key == "Fn::Or":
            return any(self.resolve(v) for v in arg)
        if key == "Fn::Join":
            separator, items = arg
            return separator.join(str(v) for v in self.resolve(items))
        if key == "Fn::Split":
            separator, text = arg
            return str(self.resolve(text)).split(separator)
        if key == "Fn::Select":
            index, items = arg
            return self.resolve(items)[int(index)]
        # The functions only Rules may use (each takes a list parameter and a string).
        if key == "Fn::Contains":
            items, wanted = (self.resolve(v) for v in arg)
            return wanted in items
        if key == "Fn::EachMemberEquals":
            items, wanted = (self.resolve(v) for v in arg)
            return all(item == wanted for item in items)
        if key == "Fn::EachMemberIn":
            items, allowed = (self.resolve(v) for v in arg)
            return all(item in allowed for item in items)
        if key == "Fn::GetAtt":
            target = ".".join(arg)
            if target in self.refs:
                return self.refs[target]
            raise KeyError(f"no test value for !GetAtt {target}")
        if key == "Fn::FindInMap":
            mapping, top, second = (self.resolve(v) for v in arg)
            return load_template()["Mappings"][mapping][str(top)][str(second)]
        if key == "Fn::Sub":
            text, variables = (arg, {}) if isinstance(arg, str) else arg
            resolved = {k: self.resolve(v) for k, v in variables.items()}
            out = text
            for name in _sub_names(text):
                if name in resolved:
                    replacement = resolved[name]
                elif "." in name:
                    replacement = self.resolve({"Fn::GetAtt": name.split(".", 1)})
                else:
                    replacement = self.ref(name)
                out = out.replace("${" + name + "}", str(replacement))
            return out
        return {key: self.resolve(arg)}


def references(value: Any, resolver: Resolver) -> set[str]:  # noqa: PLR0911 - one per intrinsic
    """Logical names a template value refers to (``Ref``, ``Fn::GetAtt``, ``${Name}`` or
    ``${Name.Attribute}`` in ``Fn::Sub``), following only the ``Fn::If`` branches the resolver's
    conditions take; parameters and pseudo parameters included."""
    found: set[str] = set()
    if isinstance(value, list):
        for item in value:
            found |= references(item, resolver)
        return found
    if not isinstance(value, dict):
        return found
    if len(value) == 1:
        ((key, arg),) = value.items()
        if key == "Ref":
            return {str(arg)}
        if key == "Fn::GetAtt":
            return {str(arg[0] if isinstance(arg, list) else str(arg).split(".", 1)[0])}
        if key == "Fn::If":
            name, when_true, when_false = arg
            return references(when_true if resolver.condition(name) else when_false, resolver)
        if key == "Fn::Sub":
            text, variables = (arg, {}) if isinstance(arg, str) else arg
            found |= references(list(variables.values()), resolver)
            return found | {
                name.split(".", 1)[0]
                for name in _sub_names(text)
                if name not in variables and not name.startswith("!")
            }
    for item in value.values():
        found |= references(item, resolver)
    return found


def dangling_references(template: Mapping[str, Any], resolver: Resolver) -> list[str]:
    """``resource -> target`` for every reference (DependsOn included) from a resource or output
    that these parameters create to a resource they do not: CloudFormation refuses such a
    template before it creates anything. In template.yaml a resource SAM generates (an event
    source mapping, a schedule rule, the API's stage) counts as existing when the translation
    creates it for these parameters."""

    def exists(res: Mapping[str, Any]) -> bool:
        return "Condition" not in res or resolver.condition(res["Condition"])

    resources = {name: res for name, res in template["Resources"].items() if exists(res)}
    known = set(resources) | set(template.get("Parameters", {}))
    if "Transform" in template:  # SAM's: what it generates is known by its generated name
        generated = translated_template()["Resources"]
        known |= {name for name, res in generated.items() if exists(res)}
    dangling = []
    for name, res in resources.items():
        depends = res.get("DependsOn", [])
        targets = references(res.get("Properties", {}), resolver)
        targets |= set([depends] if isinstance(depends, str) else depends)
        dangling += [f"{name} -> {t}" for t in sorted(targets) if not _known(t, known)]
    for name, output in template.get("Outputs", {}).items():
        if exists(output):
            targets = references(output["Value"], resolver)
            dangling += [f"output {name} -> {t}" for t in sorted(targets) if not _known(t, known)]
    return dangling


def _known(target: str, known: set[str]) -> bool:
    return target.startswith("AWS::") or target in known


def _sub_names(text: str) -> list[str]:
    names, start = [], 0
    while (i := text.find("${", start)) != -1:
        j = text.index("}", i)
        names.append(text[i + 2 : j])
        start = j + 1
    return names


def policy_actions(props: Mapping[str, Any]) -> set[str]:
    """Every IAM action a function's inline policy statements grant, on any condition branch."""
    actions: set[str] = set()

    def visit(statement: Any) -> None:
        if isinstance(statement, dict) and "Fn::If" in statement:
            for branch in statement["Fn::If"][1:]:
                visit(branch)
        elif isinstance(statement, dict) and statement.get("Effect") == "Allow":
            granted = statement["Action"]
            actions.update([granted] if isinstance(granted, str) else granted)

    policies = props.get("Policies", [])
    role = props.get("Role")
    if isinstance(role, dict) and "Fn::GetAtt" in role:  # its own role: SAM ignores Policies
        resource = load_template()["Resources"][role["Fn::GetAtt"][0]]
        policies = [p["PolicyDocument"] for p in resource["Properties"].get("Policies", [])]
    for policy in policies:
        if isinstance(policy, dict):
            for statement in policy.get("Statement", []):
                visit(statement)
    return actions


# --- the code ----------------------------------------------------------------------------


def _module_path(dotted: str) -> Path | None:
    """File of a ``webhook_inbox[.x[.y]]`` module, or None when it is not a module of ours."""
    parts = dotted.split(".")
    if parts[0] != "webhook_inbox":
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _dotted_name_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    inside_package = PACKAGE_DIR in path.parents
    current = _dotted_name_of(path) if inside_package else ""
    is_package_init = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = current.split(".")
                drop = node.level - 1 if is_package_init else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            # `from webhook_inbox import db` imports the submodule webhook_inbox.store.db
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def module_closure(entry: Path) -> list[Path]:
    """``entry`` plus every webhook_inbox module it can import, directly or transitively."""
    seen: dict[Path, None] = {entry: None}
    queue = [entry]
    while queue:
        path = queue.pop()
        for dotted in _imported_modules(path):
            parts = dotted.split(".")
            # importing a.b.c runs a/__init__, a/b/__init__ too
            for depth in range(1, len(parts) + 1):
                module = _module_path(".".join(parts[:depth]))
                if module is not None and module not in seen:
                    seen[module] = None
                    queue.append(module)
    return list(seen)


def _callee_name(node: ast.Call) -> str:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    return ""


def settings_classes(paths: Iterable[Path]) -> list[type]:
    """The settings classes (dataclasses with :func:`webhook_inbox.config.setting` fields, all in
    ``webhook_inbox.settings``) that the modules among ``paths`` name, other than the settings
    module itself: what a function with that closure reads. A class's inherited fields count."""
    module = importlib.import_module("webhook_inbox.settings")
    defined = {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type)
        and value.__module__ == module.__name__
        and dataclasses.is_dataclass(value)
        and config.variables(value)
    }
    named: set[str] = set()
    for path in paths:
        if path == SETTINGS_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Name):
                named.add(node.id)
            elif isinstance(node, ast.Attribute):
                named.add(node.attr)
            elif isinstance(node, ast.alias):
                named.add(node.name)
    return [cls for name, cls in defined.items() if name in named]


def settings_variables(paths: Iterable[Path]) -> set[str]:
    """Every environment variable the settings classes of ``paths`` read."""
    return {v for cls in settings_classes(paths) for v in config.variables(cls).values()}


def string_constants(paths: Iterable[Path]) -> set[str]:
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


_METRIC_NAME = re.compile(r"^[A-Z][a-z]+(?:[A-Z][a-z]*)+$|^[A-Z][a-z]{3,}$")


def emf_metric_names(paths: Iterable[Path]) -> set[str]:
    """Metric-like names (``CamelCase``) in the modules that add EMF metrics (a call to
    ``add_metric`` or ``single_metric``): a superset of what the code can emit as EMF."""
    found: set[str] = set()
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        calls = {_callee_name(n) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        if calls & {"add_metric", "single_metric"}:
            found |= {
                n.value
                for n in ast.walk(tree)
                if isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and _METRIC_NAME.match(n.value)
            }
    return found


def imports_module(paths: Iterable[Path], top_level: str) -> bool:
    return any(
        name == top_level or name.startswith(top_level + ".")
        for path in paths
        for name in _imported_modules(path)
    )


@dataclass
class Boto3Usage:
    services: set[str]
    called_methods: set[str]


def boto3_usage(paths: Iterable[Path]) -> Boto3Usage:
    """Services passed to ``….client("name")`` (or a wrapper named ``*_client``) and every
    method name called anywhere as an attribute (``x.name(…)``: how a client's methods are
    called; a plain function such as ``create_connection(…)`` from socket is not one)."""
    services: set[str] = set()
    methods: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            callee = _callee_name(node)
            if isinstance(node.func, ast.Attribute):
                methods.add(callee)
            first = node.args[0] if node.args else None
            if (
                callee.endswith("client")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                services.add(first.value)
            for keyword in node.keywords:  # client(service_name="sqs")
                if (
                    callee.endswith("client")
                    and keyword.arg == "service_name"
                    and isinstance(keyword.value, ast.Constant)
                ):
                    services.add(str(keyword.value.value))
    return Boto3Usage(services, methods)


def is_placeholder(app_path: Path, attribute: str = "handler") -> bool:
    """True while functions/<name>/app.py is the foundation's stub (its handler only raises
    NotImplementedError): the function's own issue has not landed on this branch yet."""
    tree = ast.parse(app_path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == attribute:
            body = [
                stmt
                for stmt in node.body
                if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
            ]
            if len(body) != 1 or not isinstance(body[0], ast.Raise):
                return False
            raised = body[0].exc
            if isinstance(raised, ast.Call):
                raised = raised.func
            return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"
    return False
