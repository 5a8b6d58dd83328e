"""Preflight's account checks as the account really behaves (issue 26 §4): the stack's own network's
room, the small installation's reservation, the shipped samconfig.toml, organisation policies
against a public Function URL, ProvidersConfig as ingest validates it, and what a failed call
means (no credentials, not found in the region, access denied, not implemented)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tests.integration.cli.test_preflight import (
    REAL_CLIENTS,
    REGION,
    Vpc,
    aws,
    ec2,
    failures,
    findings,
    make_clients,
    of,
    only_failure,
    options,
    vpc,
)
from webhook_inbox_tools.cli import main
from webhook_inbox_tools.cli import preflight as pf

__all__ = ["aws", "ec2", "vpc"]  # fixtures, shared with test_preflight


def test_without_a_vpc_the_stack_builds_its_own_when_the_region_has_room(aws: None) -> None:
    """On 5276659 an empty VpcId was a FAIL ("no VPC or subnets given")."""
    found = findings(pf.Options(region=REGION))
    assert [f for f in found if f.status == pf.FAIL] == []
    zones, network = of(found, "network")
    assert zones.detail == (
        "the own network's subnets go to us-east-1a (use1-az6), us-east-1b (use1-az1)"
    )
    assert network.detail.startswith("no VpcId: the stack builds its own")
    ec2 = boto3.client("ec2", region_name=REGION)
    for i in range(len(ec2.describe_vpcs()["Vpcs"]), 5):  # moto's default VPC, then the quota
        ec2.create_vpc(CidrBlock=f"10.{i}.0.0/16")
    finding = only_failure(pf.Options(region=REGION), "network")
    assert "5 VPCs in us-east-1, the quota is 5" in finding.detail
    assert "L-F678F1CE" in finding.fix


def test_a_zone_where_lambda_cannot_attach_is_refused_with_two_that_work(aws: None) -> None:
    """Zone names differ between accounts; Zone IDs do not: us-east-1's use1-az3 (moto maps
    us-east-1e to it) takes no Lambda function's network interface."""
    finding = only_failure(
        pf.Options(region=REGION, new_vpc_zones=["us-east-1a", "us-east-1e"]), "network"
    )
    assert finding.detail == (
        "us-east-1e is zone use1-az3, where Lambda cannot attach functions to its subnets"
    )
    assert finding.fix == "set NewVpcZones=us-east-1a,us-east-1b"
    finding = only_failure(pf.Options(region=REGION, new_vpc_zones=["us-east-1z"]), "network")
    assert "us-east-1z is not an available zone of us-east-1" in finding.detail
    assert "NewVpcZones names 1 zones; the own network takes two" in finding.detail


@pytest.mark.parametrize(
    ("region", "outbox", "missing"),
    [
        ("ap-east-2", "eventbridge", "sqs, secretsmanager, events have"),
        ("ap-southeast-6", "sns", "sqs, secretsmanager, sns have"),
        ("eu-west-1", "eventbridge", ""),
    ],
)
def test_a_region_without_dual_stack_endpoints_is_refused_for_the_own_network(
    region: str, outbox: str, missing: str
) -> None:
    """The own network reaches AWS over IPv6 only: botocore's endpoint data (the functions' SDK)
    declares no dual-stack name for these services in two commercial regions."""
    from webhook_inbox_tools.cli.preflight.own_network import check_dual_stack_region

    found = check_dual_stack_region(region, pf.Options(region=region, outbox_destination=outbox))
    if not missing:
        assert found == []
        return
    (finding,) = found
    assert finding.status == pf.FAIL
    assert finding.detail.startswith(missing + " no dual-stack endpoint in " + region)
    assert "existing VPC" in finding.fix


def test_existing_vpc_settings_without_a_vpc_fail_as_the_rules_would(aws: None) -> None:
    opts = pf.Options(region=REGION, route_table_ids=["rtb-1"], existing_vpc_endpoints=["s3"])
    finding = only_failure(opts, "network")
    assert finding.detail.startswith("PrivateRouteTableIds, ExistingVpcEndpoints describe")
    arn = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:db-AbCdEf"
    found = failures(pf.Options(region=REGION, database_secret_arn=arn))
    assert "no VpcId: the stack's own network reaches only" in of(found, "network")[0].detail


def test_without_rds_proxy_ingest_reserves_concurrency_too(vpc: Vpc) -> None:
    """The small set (CreateDatabaseProxy=false) reserves IngestReservedConcurrency behind the
    HTTP API as well: the template's ReserveIngestConcurrency condition."""
    small = options(vpc, create_database_proxy=False, ingest_reserved_concurrency=20)
    found = failures(small, make_clients(unreserved=110))
    assert [f.check for f in found] == ["Lambda concurrency"]
    assert "(CreateDatabaseProxy=false) leaves 90" in found[0].detail
    assert found[0].fix.endswith("or keep RDS Proxy (CreateDatabaseProxy=true) (no reservation)")
    assert failures(options(vpc), make_clients(unreserved=110)) == []
    (database,) = of(findings(small), "database secret")
    assert database.detail.endswith("without RDS Proxy")


@pytest.mark.parametrize("env", ["default", "small"])
def test_the_shipped_samconfig_passes_preflight_in_a_fresh_account(
    env: str,
    aws: None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every default deploys (issue 26): the repository's samconfig.toml, both environments,
    against an account that has only its default VPC."""
    shipped = Path(__file__).parents[3] / "samconfig.toml"
    monkeypatch.setattr(pf, "Clients", lambda region: make_clients())
    args = ["preflight", "--config", str(shipped), "--config-env", env, "--region", REGION]
    assert main(args) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "[  ok] network: no VpcId: the stack builds its own" in out
    reserved = "10 reserved to bound ingest's database connections"
    assert (reserved in out) == (env == "small")


# --- organisation policies against a public Function URL ---------------------------------------

DENY_PUBLIC_URLS = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Deny",
            "Action": ["lambda:CreateFunctionUrlConfig", "lambda:UpdateFunctionUrlConfig"],
            "Resource": "*",
            "Condition": {"StringEquals": {"lambda:FunctionUrlAuthType": "NONE"}},
        }
    ],
}


def organization(policy: dict[str, Any] | None = None) -> None:
    org = boto3.client("organizations", region_name=REGION)
    org.create_organization(FeatureSet="ALL")
    if policy:
        root = org.list_roots()["Roots"][0]["Id"]
        created = org.create_policy(
            Name="no-public-urls",
            Description="d",
            Type="SERVICE_CONTROL_POLICY",
            Content=json.dumps(policy),
        )
        org.attach_policy(PolicyId=created["Policy"]["PolicySummary"]["Id"], TargetId=root)


def test_an_scp_that_denies_public_function_urls_fails_a_function_url_deploy(vpc: Vpc) -> None:
    organization(DENY_PUBLIC_URLS)
    finding = only_failure(options(vpc, endpoint="FunctionUrl"), "organisation policy")
    assert "no-public-urls" in finding.detail
    assert "Endpoint=HttpApi" in finding.fix
    assert failures(options(vpc)) == []  # behind the HTTP API nothing is public in Lambda


def test_an_organisation_without_such_a_policy_passes(vpc: Vpc) -> None:
    organization()
    (policy,) = of(findings(options(vpc, endpoint="FunctionUrl")), "organisation policy")
    assert policy.status == pf.OK
    assert "none denies" in policy.detail


def test_no_organisation_passes(vpc: Vpc) -> None:
    (policy,) = of(findings(options(vpc, endpoint="FunctionUrl")), "organisation policy")
    assert policy.status == pf.OK
    assert "no organisation" in policy.detail


def test_a_member_account_that_cannot_read_scps_is_warned(vpc: Vpc) -> None:
    real = make_clients()
    stub = Stubber(real.organizations)
    stub.add_client_error("describe_organization", "AccessDeniedException", http_status_code=403)
    stub.activate()
    (policy,) = of(pf.run(real, options(vpc, endpoint="FunctionUrl")), "organisation policy")
    assert policy.status == pf.WARN
    assert "only the management account or a delegated administrator" in policy.detail


# --- ProvidersConfig, validated by the runtime's own code -------------------------------------


def test_providers_config_that_ingest_would_refuse_fails(vpc: Vpc) -> None:
    """On 5276659 `{not json` passed."""
    finding = only_failure(options(vpc, providers_config="{not json"), "ProvidersConfig")
    assert "not JSON" in finding.detail
    unknown_scheme = json.dumps({"providers": {"acme": {"scheme": "nope", "secrets": []}}})
    only_failure(options(vpc, providers_config=unknown_scheme), "ProvidersConfig")


def test_a_valid_providers_config_passes(vpc: Vpc) -> None:
    config = json.dumps({"providers": {"gh": {"scheme": "github", "secrets": [{"env": "GH"}]}}})
    (check,) = of(findings(options(vpc, providers_config=config)), "ProvidersConfig")
    assert check.status == pf.OK
    assert "gh" in check.detail


def test_the_add_a_provider_pointer_names_a_section_that_exists(vpc: Vpc) -> None:
    (secrets,) = of(findings(options(vpc)), "provider secrets")
    assert secrets.fix == "add them after the deploy (docs/deploy.md, 'Add a provider')"
    deploy = (Path(__file__).parents[3] / "docs" / "deploy.md").read_text()
    assert "**Add a provider.**" in deploy


# --- what a failed call means --------------------------------------------------------------------


def test_no_credentials_is_one_finding_that_says_sign_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outside moto, with every credential source emptied: botocore refuses before any request."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    found = pf.run(REAL_CLIENTS(REGION), pf.Options(region=REGION))
    assert [(f.status, f.check) for f in found] == [(pf.FAIL, "credentials")]
    assert "no AWS credentials" in found[0].detail
    assert "sign in" in found[0].fix


def test_a_subnet_not_in_the_region_is_not_found_not_access_denied(vpc: Vpc) -> None:
    finding = only_failure(
        options(vpc, subnet_ids=[vpc.subnets[0], "subnet-0123456789abcdef0"]), "network"
    )
    assert finding.detail.startswith(f"not found in {REGION}")
    assert "--region" in finding.fix
    assert "role allowed" not in finding.fix


def test_access_denied_names_the_actions(vpc: Vpc) -> None:
    real = make_clients()
    stub = Stubber(real.ec2)
    stub.add_client_error("describe_subnets", "UnauthorizedOperation", http_status_code=403)
    stub.activate()
    (finding,) = [f for f in pf.run(real, options(vpc)) if f.status == pf.FAIL]
    assert finding.detail == "could not check: access denied (UnauthorizedOperation)"
    assert finding.fix.startswith("run preflight with a role allowed ec2:DescribeSubnets")


def test_against_plain_moto_preflight_exits_0(vpc: Vpc, capsys: pytest.CaptureFixture[str]) -> None:
    """No stub: moto lacks Lambda's GetAccountSettings and Route 53 Profiles, which are then
    "could not check" warnings; on 5276659 the missing call was a FAIL (exit 1)."""
    args = ["preflight", "--region", REGION, "--vpc-id", vpc.vpc_id]
    args += ["--subnet-ids", ",".join(vpc.subnets), "--route-table-ids", ",".join(vpc.route_tables)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[warn] Lambda concurrency: could not check: this endpoint does not implement" in out
