"""template.yaml as it would deploy: SAM's own translation, resolved for one parameter set
(the template's defaults, a samconfig.toml environment's ``parameter_overrides``, then any
overrides given), with the resources whose condition is false left out. What the at-rest bill
(:mod:`bench.cost_at_rest`) and the idle sweeper's run (:mod:`bench.idle_sweep`) count from."""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import infra_support

ROOT = Path(__file__).resolve().parent.parent
SAMCONFIG = ROOT / "samconfig.toml"
# Values for parameters without a default (an existing network), used only to count: two AZs.
PLACEHOLDERS = {
    "AWS::EC2::VPC::Id": "vpc-0example",
    "List<AWS::EC2::Subnet::Id>": "subnet-0example1,subnet-0example2",
}


@dataclass
class Deployment:
    """The translated template's resources for one parameter set, intrinsics resolved."""

    name: str
    parameters: dict[str, Any]
    template: dict[str, Any]
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.resolver = _Resolver(
            self.parameters, infra_support.Placeholders(), self.template.get("Conditions", {})
        )
        for name, res in self.template["Resources"].items():
            if "Condition" not in res or self.resolver.condition(res["Condition"]):
                self.resources[name] = res

    def props(self, name: str) -> dict[str, Any]:
        resolved: dict[str, Any] = self.resolver.resolve(self.resources[name].get("Properties", {}))
        return resolved

    def of_type(self, kind: str) -> list[str]:
        return [n for n, r in self.resources.items() if r["Type"] == kind]


class _Resolver(infra_support.Resolver):
    def __init__(self, parameters: Any, refs: Any, conditions: Mapping[str, Any]) -> None:
        super().__init__(parameters, refs)
        self.conditions = conditions

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.conditions[name]))


def config_env_overrides(env: str) -> dict[str, str]:
    """samconfig.toml's ``[env.deploy.parameters] parameter_overrides`` (a list or one string)."""
    config = tomllib.loads(SAMCONFIG.read_text())
    if env not in config:
        raise KeyError(f"samconfig.toml has no [{env}] environment")
    raw = config[env].get("deploy", {}).get("parameters", {}).get("parameter_overrides", [])
    items = raw if isinstance(raw, list) else shlex.split(raw)
    return dict(item.split("=", 1) for item in items)


def deployment(env: str, overrides: Mapping[str, str] | None = None) -> Deployment:
    given = {**config_env_overrides(env), **(overrides or {})}
    for name, spec in infra_support.load_template().get("Parameters", {}).items():
        if "Default" not in spec and name not in given:
            given[name] = PLACEHOLDERS[spec["Type"]]
    parameters = infra_support.parameter_values(**given)
    return Deployment(env, parameters, infra_support.translated_template())
