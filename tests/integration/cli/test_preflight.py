"""`webhook-inbox preflight` against moto: one account per test, one finding at a time.

moto does not implement Lambda's GetAccountSettings, so that single call is answered by a
botocore Stubber on a real client; everything else is moto's EC2, Secrets Manager, KMS and
CloudFormation.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from webhook_inbox_tools.cli import main
from webhook_inbox_tools.cli import preflight as pf

REGION = "us-east-1"
REAL_CLIENTS = pf.Clients  # the command test swaps the module's for one built here


@dataclass
class Vpc:
    vpc_id: str
    subnets: list[str]
    route_tables: list[str]


def make_clients(unreserved: int = 990) -> pf.Clients:
    lambda_client = boto3.client("lambda", region_name=REGION)
    stub = Stubber(lambda_client)
    limits = {"ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": unreserved}
    stub.add_response("get_account_settings", {"AccountLimit": limits})
    stub.activate()

    def factory(service: str) -> Any:
        return lambda_client if service == "lambda" else boto3.client(service, region_name=REGION)

    return REAL_CLIENTS(REGION, factory)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        yield


@pytest.fixture
def ec2(aws: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def vpc(ec2: Any) -> Vpc:
    """Two private subnets in two AZs, each with its own route table and no way out; DNS
    hostnames on (the API creates a VPC without them), as private-DNS endpoints need."""
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    subnets, tables = [], []
    for i, zone in enumerate(("us-east-1a", "us-east-1b")):
        subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=zone)
        table = ec2.create_route_table(VpcId=vpc_id)["RouteTable"]["RouteTableId"]
        ec2.associate_route_table(RouteTableId=table, SubnetId=subnet["Subnet"]["SubnetId"])
        subnets.append(subnet["Subnet"]["SubnetId"])
        tables.append(table)
    return Vpc(vpc_id, subnets, tables)


def options(vpc: Vpc, **overrides: Any) -> pf.Options:
    base = pf.Options(
        region=REGION, vpc_id=vpc.vpc_id, subnet_ids=vpc.subnets, route_table_ids=vpc.route_tables
    )
    return replace(base, **overrides)


def failures(opts: pf.Options, clients: pf.Clients | None = None) -> list[pf.Finding]:
    return [f for f in findings(opts, clients) if f.status == pf.FAIL]


def findings(opts: pf.Options, clients: pf.Clients | None = None) -> list[pf.Finding]:
    """Preflight's findings; every one that is not ``ok`` must say how to fix it."""
    found = pf.run(clients or make_clients(), opts)
    assert [f for f in found if f.status != pf.OK and not f.fix] == [], pf.render(found)
    return found


def of(found: list[pf.Finding], check: str) -> list[pf.Finding]:
    return [f for f in found if f.check == check]


def only_failure(opts: pf.Options, check: str) -> pf.Finding:
    found = failures(opts)
    assert [f.check for f in found] == [check], pf.render(found)
    assert found[0].fix, "every failure says how to fix it"
    return found[0]


def test_a_ready_account_passes(vpc: Vpc) -> None:
    assert failures(options(vpc)) == []


S3_CHECK = "S3 route (custom resource, idle ledger)"


def test_endpoints_without_route_tables_fail_with_the_route_tables_to_pass(vpc: Vpc) -> None:
    finding = only_failure(options(vpc, route_table_ids=[]), S3_CHECK)
    assert finding.fix == f"set PrivateRouteTableIds={','.join(sorted(vpc.route_tables))}"


def test_a_subnet_whose_route_table_is_left_out_fails(vpc: Vpc) -> None:
    finding = only_failure(options(vpc, route_table_ids=vpc.route_tables[:1]), S3_CHECK)
    assert vpc.subnets[1] in finding.detail


def test_no_endpoints_and_no_nat_fails(vpc: Vpc) -> None:
    """Two problems: the custom resource cannot answer, the functions cannot call SQS & co."""
    found = failures(options(vpc, create_vpc_endpoints=False))
    assert [f.check for f in found] == [S3_CHECK, "VPC endpoints"]
    assert "reach no sqs, secretsmanager, events" in found[1].detail


def test_no_endpoints_with_a_nat_passes(vpc: Vpc, ec2: Any) -> None:
    public = ec2.create_subnet(VpcId=vpc.vpc_id, CidrBlock="10.0.9.0/24")["Subnet"]["SubnetId"]
    eip = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=eip)["NatGateway"]["NatGatewayId"]
    for table in vpc.route_tables:
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    assert failures(options(vpc, create_vpc_endpoints=False, route_table_ids=[])) == []


def test_an_s3_gateway_the_vpc_already_has_must_be_reused(vpc: Vpc, ec2: Any) -> None:
    ec2.create_vpc_endpoint(
        VpcId=vpc.vpc_id,
        ServiceName=f"com.amazonaws.{REGION}.s3",
        VpcEndpointType="Gateway",
        RouteTableIds=vpc.route_tables,
    )
    finding = only_failure(options(vpc), S3_CHECK)
    assert "ExistingVpcEndpoints" in finding.fix
    assert failures(options(vpc, existing_vpc_endpoints=["s3"], route_table_ids=[])) == []


def test_public_subnets_fail(vpc: Vpc, ec2: Any) -> None:
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc.vpc_id)
    ec2.create_route(
        RouteTableId=vpc.route_tables[0], DestinationCidrBlock="0.0.0.0/0", GatewayId=igw
    )
    finding = only_failure(options(vpc), "subnets")
    assert vpc.subnets[0] in finding.detail


def test_subnets_in_one_az_fail(vpc: Vpc, ec2: Any) -> None:
    third = ec2.create_subnet(
        VpcId=vpc.vpc_id, CidrBlock="10.0.5.0/24", AvailabilityZone="us-east-1a"
    )["Subnet"]["SubnetId"]
    ec2.associate_route_table(RouteTableId=vpc.route_tables[0], SubnetId=third)
    finding = only_failure(options(vpc, subnet_ids=[vpc.subnets[0], third]), "subnets")
    assert "two AZs" in finding.detail


def test_an_interface_endpoint_with_private_dns_would_collide(vpc: Vpc, ec2: Any) -> None:
    ec2.create_vpc_endpoint(
        VpcId=vpc.vpc_id,
        ServiceName=f"com.amazonaws.{REGION}.sqs",
        VpcEndpointType="Interface",
        SubnetIds=vpc.subnets,
        PrivateDnsEnabled=True,
    )
    finding = only_failure(options(vpc), "VPC endpoints")
    assert "conflicting DNS domain" in finding.detail
    assert finding.fix.startswith("set ExistingVpcEndpoints=sqs ")
    assert failures(options(vpc, existing_vpc_endpoints=["sqs"])) == []


def test_a_declared_endpoint_the_vpc_lacks_fails(vpc: Vpc) -> None:
    finding = only_failure(options(vpc, existing_vpc_endpoints=["secretsmanager"]), "VPC endpoints")
    assert "no such endpoint" in finding.detail


def test_an_rds_managed_secret_needs_a_host_and_its_key(vpc: Vpc) -> None:
    key = boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["Arn"]
    secret = json.dumps({"username": "postgres", "password": "do-not-print-me"})
    arn = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="rds!db-0123", SecretString=secret, KmsKeyId=key
    )["ARN"]
    found = failures(options(vpc, database_secret_arn=arn))
    assert [f.check for f in found] == ["database secret", "database secret"]
    assert found[0].fix.startswith("set DatabaseHost")
    assert found[1].fix == f"set DatabaseSecretKmsKeyArn={key}"
    assert "do-not-print-me" not in pf.render(found)
    fixed = options(
        vpc, database_secret_arn=arn, database_host="db.internal", database_secret_kms_key_arn=key
    )
    assert failures(fixed) == []


def test_a_missing_database_secret_fails(vpc: Vpc) -> None:
    arn = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:nope-AbCdEf"
    finding = only_failure(options(vpc, database_secret_arn=arn), "database secret")
    assert "ResourceNotFoundException" in finding.detail


def test_provider_secrets_under_a_foreign_key_are_unreadable(vpc: Vpc) -> None:
    key = boto3.client("kms", region_name=REGION).create_key()["KeyMetadata"]["Arn"]
    secrets = boto3.client("secretsmanager", region_name=REGION)
    secrets.create_secret(Name="webhook-inbox/providers/github", SecretString="s")
    secrets.create_secret(Name="webhook-inbox/providers/stripe", SecretString="s", KmsKeyId=key)
    finding = only_failure(options(vpc), "provider secrets")
    assert "webhook-inbox/providers/stripe" in finding.detail
    assert "github" not in finding.detail


def test_providers_config_must_name_secrets_under_the_prefix(vpc: Vpc) -> None:
    arn = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="elsewhere/stripe", SecretString="s"
    )["ARN"]
    stripe = {"scheme": "stripe", "secrets": [{"secret_arn": arn}]}
    config = json.dumps({"providers": {"stripe": stripe}})
    finding = only_failure(options(vpc, providers_config=config), "provider secrets")
    assert arn in finding.detail


def test_invalid_stack_name_fails(vpc: Vpc) -> None:
    only_failure(options(vpc, stack_name="1-webhooks"), "stack name")


def test_a_stack_left_in_rollback_complete_fails(vpc: Vpc) -> None:
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName="webhook-inbox", TemplateBody=json.dumps(template))
    assert failures(options(vpc)) == []  # an existing, healthy stack is updated
    real = make_clients()
    stub = Stubber(real.cloudformation)
    stack = {"StackName": "webhook-inbox", "StackStatus": "ROLLBACK_COMPLETE"}
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{**stack, "CreationTime": "2026-01-01T00:00:00Z"}]},
    )
    stub.activate()
    found = pf.check_stack(real, options(vpc))
    assert [f.status for f in found] == [pf.FAIL]
    assert "delete-stack" in found[0].fix


def test_too_little_lambda_concurrency_fails(vpc: Vpc) -> None:
    found = failures(options(vpc, processor_max_concurrency=5), make_clients(unreserved=10))
    assert [f.check for f in found] == ["Lambda concurrency"]
    assert "L-B99A9384" in found[0].fix


def test_command_reads_samconfig_and_exits_1_with_a_checklist(
    vpc: Vpc, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "samconfig.toml"
    config.write_text(
        'version = 0.1\n[default.global.parameters]\nstack_name = "inbox-test"\n'
        '[default.deploy.parameters]\nregion = "us-east-1"\nparameter_overrides = [\n'
        f'  "VpcId={vpc.vpc_id}",\n  "SubnetIds={",".join(vpc.subnets)}",\n'
        '  "CreateVpcEndpoints=true",\n]\n'
    )
    monkeypatch.setattr(pf, "Clients", lambda region: make_clients())
    assert main(["preflight", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] S3 route (custom resource, idle ledger)" in out
    assert "fix: set PrivateRouteTableIds=" in out
    assert "[  ok] stack name: inbox-test" in out
    assert out.rstrip().endswith("1 problem(s): fix them before `sam deploy`")
    tables = ",".join(vpc.route_tables)
    assert main(["preflight", "--config", str(config), "--route-table-ids", tables]) == 0
    assert "ready: `sam deploy` should succeed" in capsys.readouterr().out


def test_without_a_region_the_command_says_so_and_exits_2(
    vpc: Vpc, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --region, none in the config, none in the environment or profile: a usage error,
    not a traceback."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    args = ["preflight", "--vpc-id", vpc.vpc_id, "--subnet-ids", ",".join(vpc.subnets)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no AWS region")
    assert "--region" in err


def guided_samconfig(path: Path, parameters: dict[str, str]) -> None:
    """samconfig.toml as `sam deploy --guided` saves it: parameter_overrides as one string of
    Key="Value" pairs, each value's double quotes escaped (samcli's quote_parameter_values)."""
    pairs = " ".join(
        '{}="{}"'.format(key, value.replace('"', '\\"')) for key, value in parameters.items()
    )
    path.write_text(
        'version = 0.1\n[default.deploy.parameters]\nstack_name = "inbox-guided"\n'
        f'region = "us-east-1"\nparameter_overrides = {json.dumps(pairs)}\n'
    )


def test_a_guided_samconfig_with_providers_config_is_read_whole(vpc: Vpc, tmp_path: Path) -> None:
    """ProvidersConfig is JSON: quotes and spaces inside the saved value must survive."""
    foreign = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:elsewhere/stripe-AbCdEf"
    providers_config = json.dumps(
        {"providers": {"stripe": {"scheme": "stripe", "secrets": [{"secret_arn": foreign}]}}}
    )
    config = tmp_path / "samconfig.toml"
    guided_samconfig(
        config,
        {
            "VpcId": vpc.vpc_id,
            "SubnetIds": ",".join(vpc.subnets),
            "PrivateRouteTableIds": ",".join(vpc.route_tables),
            "ProvidersConfig": providers_config,
            "ProcessorMaxConcurrency": "7",
        },
    )
    opts = pf.Options(**pf.options_from_config(config))
    assert opts.stack_name == "inbox-guided"
    assert opts.providers_config == providers_config
    assert opts.route_table_ids == vpc.route_tables
    assert opts.processor_max_concurrency == 7
    finding = only_failure(opts, "provider secrets")
    assert foreign in finding.detail


def test_private_dns_endpoints_need_the_vpcs_dns_attributes(vpc: Vpc, ec2: Any) -> None:
    """A VPC made by the API or CloudFormation has DNS hostnames off: every interface endpoint
    with private DNS then fails to create."""
    ec2.modify_vpc_attribute(VpcId=vpc.vpc_id, EnableDnsHostnames={"Value": False})
    finding = only_failure(options(vpc), "VPC DNS")
    assert "enableDnsHostnames" in finding.detail
    assert f"--vpc-id {vpc.vpc_id} --enable-dns-hostnames" in finding.fix
    # With a NAT and no endpoints the attributes do not matter to the stack.
    assert "VPC DNS" not in [f.check for f in failures(options(vpc, create_vpc_endpoints=False))]
    ec2.modify_vpc_attribute(VpcId=vpc.vpc_id, EnableDnsHostnames={"Value": True})
    assert failures(options(vpc)) == []


# IAM prefix (the Clients attribute) -> boto3's client name, where they differ.
CLIENT_NAMES = {"servicequotas": "service-quotas"}


def preflight_calls() -> set[str]:
    """Every IAM action behind an ``aws.<client>.<method>(…)`` call in the preflight package."""
    modules = sorted(Path(pf.__file__).parent.glob("*.py"))
    actions = set()
    nodes = (node for module in modules for node in ast.walk(ast.parse(module.read_text())))
    for node in nodes:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if (
            isinstance(owner, ast.Attribute)
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "aws"
        ):
            service = owner.attr.rstrip("_")  # Clients.lambda_ is the lambda client
            client = CLIENT_NAMES.get(service, service)
            mapping = boto3.client(client, region_name=REGION).meta.method_to_api_mapping
            actions.add(f"{service}:{mapping[node.func.attr]}")
    return actions


def test_the_documented_iam_needs_are_exactly_the_calls_preflight_makes() -> None:
    deploy = (Path(__file__).parents[3] / "docs" / "deploy.md").read_text()
    paragraph = deploy.split("Its IAM needs (read-only):", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"`([a-z0-9-]+:[A-Za-z]+)`", paragraph))
    called = preflight_calls()
    assert len(called) >= 9, "the scan should see every client call"
    assert documented == called


# --- Endpoint=FunctionUrl: ingest reserves concurrency ---------------------------------------


def test_a_function_url_with_room_for_its_reservation_passes(vpc: Vpc) -> None:
    opts = options(vpc, endpoint="FunctionUrl", ingest_reserved_concurrency=20)
    assert failures(opts, make_clients(unreserved=990)) == []


def test_a_reservation_that_would_leave_lambdas_minimum_fails_with_the_most_that_fits(
    vpc: Vpc,
) -> None:
    opts = options(vpc, endpoint="FunctionUrl", ingest_reserved_concurrency=20)
    found = failures(opts, make_clients(unreserved=110))
    assert [f.check for f in found] == ["Lambda concurrency"]
    assert "leaves 90" in found[0].detail
    assert found[0].fix.startswith("lower IngestReservedConcurrency to 10 or less")
    # The same account is fine behind the HTTP API, which reserves nothing.
    assert failures(options(vpc), make_clients(unreserved=110)) == []


def test_an_account_at_lambdas_minimum_cannot_reserve_at_all(vpc: Vpc) -> None:
    opts = options(vpc, endpoint="FunctionUrl", ingest_reserved_concurrency=1)
    (finding,) = failures(opts, make_clients(unreserved=100))
    assert "lower IngestReservedConcurrency" not in finding.fix
    assert "Endpoint=HttpApi" in finding.fix


def test_the_deployed_stacks_own_reservation_counts_as_available(aws: None) -> None:
    """Redeploying with the same reservation needs no more than the pool plus what it holds."""
    lambda_client = boto3.client("lambda", region_name=REGION)
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    lambda_stub, cfn_stub = Stubber(lambda_client), Stubber(cloudformation)
    limits = {"ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 100}
    lambda_stub.add_response("get_account_settings", {"AccountLimit": limits})
    cfn_stub.add_response(
        "describe_stack_resource",
        {
            "StackResourceDetail": {
                "LogicalResourceId": "IngestFunction",
                "PhysicalResourceId": "webhook-inbox-IngestFunction-AbC",
                "ResourceType": "AWS::Lambda::Function",
                "LastUpdatedTimestamp": "2026-12-01T00:00:00Z",
                "ResourceStatus": "UPDATE_COMPLETE",
            }
        },
        {"StackName": "webhook-inbox", "LogicalResourceId": "IngestFunction"},
    )
    lambda_stub.add_response(
        "get_function_concurrency",
        {"ReservedConcurrentExecutions": 20},
        {"FunctionName": "webhook-inbox-IngestFunction-AbC"},
    )
    lambda_stub.activate()
    cfn_stub.activate()
    clients = {"lambda": lambda_client, "cloudformation": cloudformation}
    aws_clients = REAL_CLIENTS(
        REGION, lambda s: clients.get(s) or boto3.client(s, region_name=REGION)
    )
    opts = pf.Options(region=REGION, endpoint="FunctionUrl", ingest_reserved_concurrency=20)
    (finding,) = pf.check_concurrency(aws_clients, opts)
    assert finding.status == pf.OK, finding
    assert "120 unreserved" in finding.detail  # without it: 80 left, below 100
    lambda_stub.assert_no_pending_responses()


def test_endpoint_settings_come_from_samconfig_and_parameter_overrides(
    vpc: Vpc, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "samconfig.toml"
    config.write_text(
        'version = 0.1\n[default.deploy.parameters]\nregion = "us-east-1"\n'
        'parameter_overrides = "Endpoint=FunctionUrl IngestReservedConcurrency=50"\n'
    )
    from_config = pf.options_from_config(config)
    assert (from_config["endpoint"], from_config["ingest_reserved_concurrency"]) == (
        "FunctionUrl",
        50,
    )
    monkeypatch.setattr(pf, "Clients", lambda region: make_clients(unreserved=140))
    network = ["--vpc-id", vpc.vpc_id, "--subnet-ids", ",".join(vpc.subnets)]
    network += ["--route-table-ids", ",".join(vpc.route_tables)]
    assert main(["preflight", "--config", str(config), *network]) == 1
    assert "IngestReservedConcurrency=50 for the Function URL leaves 90" in capsys.readouterr().out
    overrides = ["--parameter-overrides", "Endpoint=FunctionUrl IngestReservedConcurrency=30"]
    assert main(["preflight", "--region", REGION, *network, *overrides]) == 0
    assert "30 reserved for the Function URL leaves 110" in capsys.readouterr().out
    assert main(["preflight", "--region", REGION, *network, "--endpoint", "HttpApi"]) == 0


def test_an_unknown_endpoint_is_a_usage_error(
    vpc: Vpc, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pf, "Clients", lambda region: make_clients())
    args = ["preflight", "--region", REGION, "--parameter-overrides", "Endpoint=RestApi"]
    assert main(args) == 2
    assert "Endpoint must be one of HttpApi, FunctionUrl" in capsys.readouterr().err


def test_each_check_family_stays_a_module_of_at_most_400_lines() -> None:
    """Issue 26: preflight grew past 800 lines in one module; it is split by check family."""
    modules = sorted(Path(pf.__file__).parent.glob("*.py"))
    assert len(modules) >= 8
    sizes = {m.name: len(m.read_text().splitlines()) for m in modules}
    assert max(sizes.values()) <= 400, sizes
