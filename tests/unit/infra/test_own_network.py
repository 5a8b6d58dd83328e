"""Every default deploys (issue 26): with VpcId empty the stack builds its own network.

The network: two private dual-stack subnets whose only ways out are the S3 gateway endpoint
(IPv4, for the custom resource's answer) and IPv6 through an egress-only internet gateway; the
functions reach SQS, Secrets Manager, EventBridge, SNS and S3 (the idle ledger) on their
dual-stack endpoints. Checked here from template.yaml and SAM's translation, against botocore's
endpoint data (the names the functions' SDK will call), and against urllib3 (what happens to an
address with no route).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import boto3
import botocore
import pytest
from botocore.config import Config

from tests.infra_support import (
    Placeholders,
    Resolver,
    boto3_usage,
    dangling_references,
    function_entry,
    load_template,
    module_closure,
    parameter_values,
    rule_failures,
    runs_in_the_vpc,
    serverless_functions,
    translated_template,
)

RESOURCES = load_template()["Resources"]
EXISTING_VPC = {
    "VpcId": "vpc-0abc",
    "SubnetIds": "subnet-a,subnet-b",
    "PrivateRouteTableIds": "rtb-1",
}
OWN_NETWORK = {
    "Vpc",
    "VpcIpv6Block",
    "PrivateSubnetA",
    "PrivateSubnetB",
    "PrivateRouteTable",
    "PrivateSubnetARouteTable",
    "PrivateSubnetBRouteTable",
    "EgressOnlyInternetGateway",
    "Ipv6EgressRoute",
    "FunctionIpv6Egress",
}
# Calls that never leave the function: the RDS IAM token is presigned locally.
LOCAL_ONLY_CLIENTS = {"rds"}
# Commercial regions where botocore 1.44.8 (the layer's) declares no dual-stack endpoint for these
# services: the own network cannot reach them there (docs/deploy.md says to use an existing VPC).
NO_DUAL_STACK_REGIONS = {"ap-east-2", "ap-southeast-6"}


def resolver(**params: str) -> Resolver:
    return Resolver(parameter_values(**params), Placeholders(), "webhook-inbox")


def created(r: Resolver, template: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    template = template or load_template()
    return {
        name: res
        for name, res in template["Resources"].items()
        if "Condition" not in res or r.condition(res["Condition"])
    }


# --- sam deploy --guided, accepting every default ------------------------------------------


def test_every_parameter_has_a_default_and_the_defaults_pass_the_rules() -> None:
    """`sam deploy --guided` offers each default; a parameter without one could not be skipped."""
    parameters = load_template()["Parameters"]
    assert [name for name, spec in parameters.items() if "Default" not in spec] == []
    assert rule_failures(resolver()) == []


@pytest.mark.parametrize("endpoint", ["HttpApi", "FunctionUrl"])
@pytest.mark.parametrize("translated", [False, True], ids=["template", "translated"])
@pytest.mark.parametrize("proxy", ["true", "false"])
def test_the_own_network_refers_to_nothing_it_lacks(
    endpoint: str, translated: bool, proxy: str
) -> None:
    template = translated_template() if translated else load_template()
    r = resolver(Endpoint=endpoint, CreateDatabaseProxy=proxy)
    assert dangling_references(template, r) == []


def test_existing_vpc_settings_without_a_vpc_are_refused() -> None:
    failures = rule_failures(resolver(SubnetIds="subnet-a,subnet-b"))
    assert len(failures) == 1
    assert "set VpcId too" in failures[0]
    assert rule_failures(resolver(SecurityGroupId="sg-1")) == failures


def test_an_existing_vpc_needs_its_subnets() -> None:
    failures = rule_failures(resolver(VpcId="vpc-0abc", CreateVpcEndpoints="false"))
    assert failures == [
        "VpcId needs SubnetIds (private subnets of that VPC in two or more AZs); leave VpcId "
        "empty to let the stack build its own network."
    ]
    assert rule_failures(resolver(**EXISTING_VPC)) == []


def test_an_existing_database_needs_the_vpc_that_reaches_it() -> None:
    existing_db = {
        "DatabaseSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbC"
    }
    (failure,) = rule_failures(resolver(**existing_db))
    assert failure.startswith("DatabaseSecretArn (an existing database) needs VpcId")
    assert rule_failures(resolver(**existing_db, **EXISTING_VPC)) == []


# --- the network it builds -------------------------------------------------------------------


def test_the_own_network_is_created_only_without_a_vpc() -> None:
    own = set(created(resolver()))
    assert own >= OWN_NETWORK | {"S3GatewayEndpoint"}
    existing = set(created(resolver(**EXISTING_VPC)))
    assert not existing & OWN_NETWORK


def test_nothing_can_reach_in_and_nothing_hourly_is_created() -> None:
    """No internet gateway, NAT gateway, or interface endpoint; the only route out is IPv6."""
    own = created(resolver())
    types = {res["Type"] for res in own.values()}
    assert not types & {"AWS::EC2::InternetGateway", "AWS::EC2::NatGateway", "AWS::EC2::EIP"}
    endpoints = [r for r in own.values() if r["Type"] == "AWS::EC2::VPCEndpoint"]
    assert [e["Properties"]["VpcEndpointType"] for e in endpoints] == ["Gateway"]
    routes = [r["Properties"] for r in own.values() if r["Type"] == "AWS::EC2::Route"]
    assert routes == [
        {
            "RouteTableId": {"Ref": "PrivateRouteTable"},
            "DestinationIpv6CidrBlock": "::/0",
            "EgressOnlyInternetGatewayId": {"Ref": "EgressOnlyInternetGateway"},
        }
    ]
    r = resolver()
    gateway = own["S3GatewayEndpoint"]["Properties"]
    assert r.resolve(gateway["RouteTableIds"]) == ["<PrivateRouteTable>"]
    assert r.resolve(gateway["VpcId"]) == "<Vpc>"


def test_two_private_dual_stack_subnets_in_two_zones_share_the_route_table() -> None:
    zones = []
    for name in ("PrivateSubnetA", "PrivateSubnetB"):
        subnet = RESOURCES[name]
        props = subnet["Properties"]
        assert props["MapPublicIpOnLaunch"] is False
        assert "Ipv6CidrBlock" in props
        assert subnet["DependsOn"] == "VpcIpv6Block"  # the VPC's IPv6 block must exist first
        default_zone = props["AvailabilityZone"]["Fn::If"][2]
        assert default_zone["Fn::Select"][1] == {"Fn::GetAZs": ""}
        zones.append(default_zone["Fn::Select"][0])
        (association,) = [
            res["Properties"]
            for res in RESOURCES.values()
            if res["Type"] == "AWS::EC2::SubnetRouteTableAssociation"
            and res["Properties"]["SubnetId"] == {"Ref": name}
        ]
        assert association["RouteTableId"] == {"Ref": "PrivateRouteTable"}
    assert sorted(zones) == [0, 1]
    assert RESOURCES["VpcIpv6Block"]["Properties"]["AmazonProvidedIpv6CidrBlock"] is True


def test_chosen_zones_place_the_subnets_and_must_come_with_the_own_network() -> None:
    r = resolver(NewVpcZones="us-east-1b,us-east-1d")
    zones = [
        r.resolve(RESOURCES[n]["Properties"]["AvailabilityZone"])
        for n in ("PrivateSubnetA", "PrivateSubnetB")
    ]
    assert zones == ["us-east-1b", "us-east-1d"]
    assert rule_failures(r) == []
    failures = rule_failures(resolver(NewVpcZones="us-east-1b,us-east-1d", **EXISTING_VPC))
    assert len(failures) == 1
    assert "NewVpcZones" in failures[0]


@pytest.mark.parametrize(
    ("params", "subnets", "ipv6", "dual_stack"),
    [
        ({}, ["<PrivateSubnetA>", "<PrivateSubnetB>"], True, "true"),
        (EXISTING_VPC, ["subnet-a", "subnet-b"], None, ""),
    ],
    ids=["own-network", "existing-vpc"],
)
def test_functions_use_ipv6_and_dual_stack_endpoints_only_in_the_own_network(
    params: dict[str, str], subnets: list[str], ipv6: bool | None, dual_stack: str
) -> None:
    r = resolver(**params)
    globals_ = load_template()["Globals"]["Function"]
    assert r.resolve(globals_["VpcConfig"]["SubnetIds"]) == subnets
    assert r.resolve(globals_["VpcConfig"]["Ipv6AllowedForDualStack"]) == ipv6
    assert (
        r.resolve(globals_["Environment"]["Variables"]["AWS_USE_DUALSTACK_ENDPOINT"]) == dual_stack
    )
    # The same signal for our own connections (webhook_inbox.network): IPv6 where a name has it.
    assert r.resolve(globals_["Environment"]["Variables"]["NETWORK_IP_FAMILY"]) == (
        "ipv6" if dual_stack else ""
    )
    for name in ("DatabaseSubnetGroup",):
        assert r.resolve(RESOURCES[name]["Properties"]["SubnetIds"]) == subnets


def test_the_functions_may_send_https_over_ipv6_and_the_migration_waits_for_it() -> None:
    egress = RESOURCES["FunctionIpv6Egress"]["Properties"]
    assert (egress["IpProtocol"], egress["FromPort"], egress["ToPort"]) == ("tcp", 443, 443)
    assert egress["CidrIpv6"] == "::/0"
    schema = RESOURCES["DatabaseSchema"]["Properties"]
    r = resolver()
    assert r.resolve(schema["Ipv6EgressReady"]) == "<FunctionIpv6Egress>"
    ready = r.resolve(schema["NetworkReady"]).split(",")
    assert set(ready) == {
        "<Ipv6EgressRoute>",
        "<PrivateSubnetARouteTable>",
        "<PrivateSubnetBRouteTable>",
    }


# --- the services the functions call, on their dual-stack names -----------------------------


def in_vpc_services() -> set[str]:
    called: set[str] = set()
    for props in serverless_functions().values():
        if runs_in_the_vpc(props):
            called |= boto3_usage(module_closure(function_entry(props)[0])).services
    return called - LOCAL_ONLY_CLIENTS


def endpoint_data() -> dict[str, Any]:
    path = Path(botocore.__file__).parent / "data" / "endpoints.json"
    partitions = json.loads(path.read_text())["partitions"]
    return next(p for p in partitions if p["partition"] == "aws")


def test_every_service_the_functions_call_has_a_dual_stack_endpoint() -> None:
    """botocore's endpoint data declares a `dualstack` variant per region where one exists."""
    services = in_vpc_services()
    assert services == {"sqs", "secretsmanager", "events", "sns", "s3"}
    aws = endpoint_data()
    without = set()
    for service in services:
        for region, spec in aws["services"][service]["endpoints"].items():
            if region in aws["regions"] and not any(
                v.get("tags") == ["dualstack"] for v in spec.get("variants", [])
            ):
                without.add(region)
    assert without == NO_DUAL_STACK_REGIONS


@pytest.mark.parametrize("service", ["sqs", "secretsmanager", "events", "sns"])
def test_the_environment_variable_sends_the_sdk_to_the_dual_stack_name(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_USE_DUALSTACK_ENDPOINT", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "")  # as deployed: empty is unset
    client = boto3.Session(region_name="eu-west-1").client(service)
    assert client.meta.endpoint_url == f"https://{service}.eu-west-1.api.aws"
    monkeypatch.setenv("AWS_USE_DUALSTACK_ENDPOINT", "")  # an existing VPC: the usual names
    client = boto3.Session(region_name="eu-west-1").client(service)
    assert client.meta.endpoint_url == f"https://{service}.eu-west-1.amazonaws.com"


def test_the_environment_variable_sends_s3_to_its_dual_stack_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The idle ledger: S3's dual-stack name is s3.dualstack.<region>.amazonaws.com (no api.aws
    name), which resolves to IPv6 addresses too; an existing VPC uses the usual one through its
    S3 gateway endpoint or NAT."""
    monkeypatch.setenv("AWS_USE_DUALSTACK_ENDPOINT", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "")
    client = boto3.Session(region_name="eu-west-1").client("s3")
    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": "ledger-bucket", "Key": "activity.json"}
    )
    assert url.startswith("https://ledger-bucket.s3.dualstack.eu-west-1.amazonaws.com/")
    monkeypatch.setenv("AWS_USE_DUALSTACK_ENDPOINT", "")
    client = boto3.Session(region_name="eu-west-1").client("s3")
    url = client.generate_presigned_url(
        "get_object", Params={"Bucket": "ledger-bucket", "Key": "activity.json"}
    )
    assert "dualstack" not in url


@pytest.mark.parametrize("service", ["sqs", "secretsmanager", "events", "sns"])
def test_a_local_stacks_endpoint_still_wins_under_sam_local(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sam local invoke` resolves the template's "true"; `webhook-inbox dev` sets the URL."""
    monkeypatch.setenv("AWS_USE_DUALSTACK_ENDPOINT", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    client = boto3.Session(region_name="us-east-1").client(service)
    assert client.meta.endpoint_url == "http://127.0.0.1:5000"


# --- an address without a route: urllib3 moves on to the next one ---------------------------

UNROUTABLE = "192.0.2.1"  # TEST-NET-1: never contacted, the fake socket fails it first


class _ListQueues(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"QueueUrls": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def local_sqs() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _ListQueues)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    thread.join(timeout=5)


@pytest.mark.parametrize(
    "failure",
    [OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH)), TimeoutError("timed out")],
    ids=["no-route", "dropped"],
)
def test_the_sdk_tries_the_next_address_when_the_first_has_no_route(
    failure: OSError, local_sqs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name resolving to an IPv4 address first, which these subnets cannot reach (ENETUNREACH
    from the kernel, or a connect timeout when the VPC drops it), and then a reachable one."""
    attempts: list[str] = []
    real_socket = socket.socket

    class RecordingSocket(real_socket):  # type: ignore[misc,valid-type]
        def connect(self, address: Any) -> None:
            attempts.append(address[0])
            if address[0] == UNROUTABLE:
                raise failure
            super().connect(address)

    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        assert host == "sqs.dualstack.test"
        stream = (socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
        return [
            (socket.AF_INET, *stream, (UNROUTABLE, port)),
            (socket.AF_INET, *stream, ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(socket, "socket", RecordingSocket)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    client = boto3.client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=f"http://sqs.dualstack.test:{local_sqs}",
        aws_access_key_id="offline",
        aws_secret_access_key="offline",
        config=Config(connect_timeout=0.5, retries={"total_max_attempts": 1}),
    )
    assert client.list_queues().get("QueueUrls", []) == []
    assert attempts == [UNROUTABLE, "127.0.0.1"]
