"""The small installation and RDS Proxy as an option (issue 26, section 3).

`sam deploy --config-env small` (samconfig.toml's [small.deploy.parameters]) must pass the
template's Rules, run without RDS Proxy and keep the functions' database connections within a
db.t4g.micro's limit; without the proxy the functions use the instance's own secret and address.
"""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from tests.infra_support import (
    ROOT,
    Placeholders,
    Resolver,
    load_template,
    parameter_values,
    rule_failures,
)

RESOURCES = load_template()["Resources"]


def resolver(**params: str) -> Resolver:
    return Resolver(parameter_values(**params), Placeholders(), "webhook-inbox")


def created(r: Resolver) -> dict[str, dict[str, Any]]:
    return {
        name: res
        for name, res in RESOURCES.items()
        if "Condition" not in res or r.condition(res["Condition"])
    }


def small_parameters(env: str = "small") -> dict[str, str]:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    overrides = config[env]["deploy"]["parameters"]["parameter_overrides"]
    return dict(item.split("=", 1) for item in overrides)


def test_the_small_set_deploys_without_the_proxy_and_bounds_connections() -> None:
    params = small_parameters()
    r = resolver(**params)
    assert rule_failures(r) == []
    made = set(created(r))
    assert not made & {"DatabaseProxy", "DatabaseProxyTargetGroup", "DatabaseConnectionSecret"}
    assert "FunctionToDatabaseEgress" in made
    assert "Dashboard" not in made
    ingest = RESOURCES["IngestFunction"]["Properties"]
    reserved = int(r.resolve(ingest["ReservedConcurrentExecutions"]))
    processors = int(params["ProcessorMaxConcurrency"])
    # One connection per warm instance; the sweeper's runs rarely overlap, migrations run once.
    worst_case = reserved + processors + 2 + 1
    # db.t4g.micro: max_connections = DBInstanceClassMemory / 9531392, about 100 for 1 GiB.
    assert params["DatabaseInstanceClass"] == "db.t4g.micro"
    assert worst_case <= 50


def test_without_the_proxy_the_functions_use_the_instances_own_secret_and_address() -> None:
    r = resolver(CreateDatabaseProxy="false")
    env = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    assert r.resolve(env["DATABASE_SECRET_ARN"]) == "<Database.MasterUserSecret.SecretArn>"
    assert r.resolve(env["DATABASE_IAM_AUTH"]) == "false"
    assert r.resolve(env["DATABASE_HOST"]) == "<Database.Endpoint.Address>"
    assert r.resolve(env["DATABASE_PORT"]) == "<Database.Endpoint.Port>"
    assert r.resolve(env["DATABASE_NAME"]) == "webhook_inbox"
    assert r.resolve(env["DB_STARTUP_OPTIONS"]) == "auto"
    ingress = RESOURCES["DatabaseSecurityGroup"]["Properties"]["SecurityGroupIngress"]
    assert [r.resolve(rule["SourceSecurityGroupId"]) for rule in ingress] == [
        "<FunctionSecurityGroup>"
    ]
    with_proxy = resolver()
    assert [with_proxy.resolve(rule["SourceSecurityGroupId"]) for rule in ingress] == [
        "<ProxySecurityGroup>"
    ]
    assert with_proxy.resolve(env["DATABASE_HOST"]) == ""


@pytest.mark.parametrize(
    ("params", "reserved"),
    [({}, None), ({"CreateDatabaseProxy": "false"}, 20), ({"Endpoint": "FunctionUrl"}, 20)],
)
def test_ingest_is_reserved_behind_a_function_url_or_without_the_proxy(
    params: dict[str, str], reserved: int | None
) -> None:
    ingest = RESOURCES["IngestFunction"]["Properties"]
    assert resolver(**params).resolve(ingest["ReservedConcurrentExecutions"]) == reserved


def test_the_paused_aurora_set_pauses_without_the_proxy_and_bounds_connections() -> None:
    """samconfig's aurora-paused: Serverless v2 at 0 ACUs, no RDS Proxy (whose connections
    would keep it awake), the functions on the writer endpoint with the cluster's own secret,
    and connections bounded as in the small set."""
    params = small_parameters("aurora-paused")
    r = resolver(**params)
    assert rule_failures(r) == []
    made = set(created(r))
    assert {"DatabaseCluster", "DatabaseClusterWriter"} <= made
    assert not made & {"Database", "DatabaseClusterReader", "DatabaseProxy", "Dashboard"}
    scaling = r.resolve(RESOURCES["DatabaseCluster"]["Properties"])[
        "ServerlessV2ScalingConfiguration"
    ]
    assert str(scaling["MinCapacity"]) == "0"
    env = load_template()["Globals"]["Function"]["Environment"]["Variables"]
    assert r.resolve(env["DATABASE_SECRET_ARN"]) == "<DatabaseCluster.MasterUserSecret.SecretArn>"
    assert r.resolve(env["DATABASE_HOST"]) == "<DatabaseCluster.Endpoint.Address>"
    assert r.resolve(env["DATABASE_IAM_AUTH"]) == "false"
    reserved = int(
        r.resolve(RESOURCES["IngestFunction"]["Properties"]["ReservedConcurrentExecutions"])
    )
    worst_case = reserved + int(params["ProcessorMaxConcurrency"]) + 2 + 1
    # Serverless v2's max_connections follows the maximum capacity: 2 ACUs (4 GiB) allow
    # hundreds; the bound is the small set's.
    assert float(params["AuroraMaxCapacity"]) >= 1
    assert worst_case <= 50
