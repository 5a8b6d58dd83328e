"""preflight's deploy permissions check: the caller against the deploy policy, through IAM's
policy simulator.

moto does not implement iam:SimulatePrincipalPolicy, so the IAM and STS calls are answered by
botocore Stubbers on real clients: the requests are validated against the service model, and
every queued answer must be consumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from webhook_inbox_tools.cli import preflight as pf
from webhook_inbox_tools.cli.preflight import permissions

REGION = "eu-west-1"
ACCOUNT = "123456789012"
ROLE = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Deploy_0a1b"
ASSUMED = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Deploy_0a1b/alice"


class Aws:
    """Real IAM and STS clients behind Stubbers, and the simulator requests they were sent."""

    def __init__(self) -> None:
        self.iam = boto3.client(
            "iam", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.sts = boto3.client(
            "sts", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
        )
        self.iam_stub, self.sts_stub = Stubber(self.iam), Stubber(self.sts)
        self.simulated: list[dict[str, Any]] = []
        self.iam.meta.events.register(
            "provide-client-params.iam.SimulatePrincipalPolicy",
            lambda params, **_: self.simulated.append(dict(params)),
        )

    def clients(self) -> pf.Clients:
        # Clients reads its region from an EC2 client, which the check never calls.
        made = {"iam": self.iam, "sts": self.sts, "ec2": boto3.client("ec2", region_name=REGION)}
        return pf.Clients(REGION, lambda service: made.get(service) or _unused(service))

    def caller(self, arn: str) -> None:
        self.sts_stub.add_response(
            "get_caller_identity", {"Arn": arn, "Account": ACCOUNT, "UserId": "AIDAEXAMPLE"}
        )

    def role(self, arn: str = ROLE) -> None:
        name = arn.rsplit("/", 1)[1]
        self.iam_stub.add_response(
            "get_role",
            {
                "Role": {
                    "Path": "/",
                    "RoleName": name,
                    "RoleId": "AROAEXAMPLE1234567890",
                    "Arn": arn,
                    "CreateDate": "2026-01-01T00:00:00Z",
                    "AssumeRolePolicyDocument": "{}",
                }
            },
            {"RoleName": name},
        )

    def answer_every_group(self, opts: pf.Options, decide: Any, pages_first: int = 1) -> None:
        """One answer per simulator request the check makes (one per set of resources), each
        action's decision from ``decide(action, resources)``; the first split in pages."""
        groups: dict[tuple[str, ...], list[str]] = {}
        for action, arns in permissions._required(opts, ACCOUNT).items():
            groups.setdefault(arns, []).append(action)
        for index, (arns, actions) in enumerate(groups.items()):
            results = [_result(a, arns, decide) for a in actions]
            pages = pages_first if index == 0 else 1
            size = -(-len(results) // pages)
            for page in range(pages):
                chunk = results[page * size : (page + 1) * size]
                last = page == pages - 1
                response: dict[str, Any] = {"EvaluationResults": chunk, "IsTruncated": not last}
                if not last:
                    response["Marker"] = f"page-{page + 1}"
                expected = {"PolicySourceArn": ANY, "ActionNames": ANY, "ResourceArns": ANY}
                if page:
                    expected["Marker"] = f"page-{page}"
                self.iam_stub.add_response("simulate_principal_policy", response, expected)


def _unused(service: str) -> Any:
    raise AssertionError(f"the check should not call {service}")


def _result(action: str, arns: tuple[str, ...], decide: Any) -> dict[str, Any]:
    decision = decide(action, arns)
    result: dict[str, Any] = {"EvalActionName": action, "EvalDecision": decision}
    if decision == "mixed":  # allowed on one resource, not on another
        result["EvalDecision"] = "allowed"
        result["ResourceSpecificResults"] = [
            {"EvalResourceName": arns[0], "EvalResourceDecision": "allowed"},
            {"EvalResourceName": "other", "EvalResourceDecision": "implicitDeny"},
        ]
    return result


@pytest.fixture
def aws() -> Iterator[Aws]:
    made = Aws()
    with made.iam_stub, made.sts_stub:
        yield made
        made.iam_stub.assert_no_pending_responses()
        made.sts_stub.assert_no_pending_responses()


def options(**overrides: Any) -> pf.Options:
    return pf.Options(region=REGION, **overrides)


def test_a_role_with_the_policy_may_deploy_and_every_page_is_read(aws: Aws) -> None:
    opts = options()
    aws.caller(ASSUMED)
    aws.role()
    aws.answer_every_group(opts, lambda action, arns: "allowed", pages_first=3)
    (finding,) = permissions.check_deploy_permissions(aws.clients(), opts)
    assert finding.status == pf.OK
    # The role's own ARN with its path (the STS ARN has none), asked about its actions.
    assert {r["PolicySourceArn"] for r in aws.simulated} == {ROLE}
    asked = {a for r in aws.simulated for a in r["ActionNames"]}
    assert "ec2:DescribeNetworkInterfaces" in asked
    assert f"all {len(asked)} actions" in finding.detail


def test_missing_actions_are_named_with_the_fix(aws: Aws) -> None:
    opts = options(stack_name="billing-hooks")
    missing = {"ec2:DescribeNetworkInterfaces", "iam:PassRole", "lambda:InvokeFunction"}
    aws.caller(ASSUMED)
    aws.role()
    aws.answer_every_group(
        opts,
        lambda action, arns: (
            "implicitDeny"
            if action in missing - {"lambda:InvokeFunction"}
            else "mixed"
            if action == "lambda:InvokeFunction"
            else "allowed"
        ),
    )
    (finding,) = permissions.check_deploy_permissions(aws.clients(), opts)
    assert finding.status == pf.FAIL
    assert "not allowed 3 of the" in finding.detail
    for action in missing:
        assert action in finding.detail
    assert "infra/deploy-policy.json and infra/deploy-policy-2.json" in finding.fix
    assert "billing-hooks" in finding.fix
    # Asked about this stack's names, in this region and account.
    pass_role = next(r for r in aws.simulated if "iam:PassRole" in r["ActionNames"])
    assert pass_role["ResourceArns"] == ["arn:aws:iam::123456789012:role/billing-hooks-*"]
    functions = next(r for r in aws.simulated if "lambda:InvokeFunction" in r["ActionNames"])
    assert functions["ResourceArns"] == [
        f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:billing-hooks-*"
    ]


def test_more_missing_actions_than_shown_are_counted(aws: Aws) -> None:
    opts = options()
    aws.caller("arn:aws:iam::123456789012:user/deployer")
    aws.answer_every_group(opts, lambda action, arns: "explicitDeny")
    (finding,) = permissions.check_deploy_permissions(aws.clients(), opts)
    total = len(permissions._required(opts, ACCOUNT))
    assert finding.status == pf.FAIL
    assert f"not allowed {total} of the {total}" in finding.detail
    assert f"and {total - permissions.NAMES_SHOWN} more" in finding.detail


def test_a_caller_that_may_not_ask_the_simulator_is_told_so_and_nothing_fails(aws: Aws) -> None:
    aws.caller(ASSUMED)
    aws.role()
    aws.iam_stub.add_client_error(
        "simulate_principal_policy", "AccessDenied", "not authorized to perform", 403
    )
    (finding,) = permissions.check_deploy_permissions(aws.clients(), options())
    assert finding.status == pf.WARN
    assert "iam:SimulatePrincipalPolicy" in finding.detail
    assert "nothing about the deploy itself" in finding.detail


def test_a_role_whose_path_cannot_be_read_is_asked_about_without_one(aws: Aws) -> None:
    opts = options()
    aws.caller(ASSUMED)
    aws.iam_stub.add_client_error("get_role", "AccessDenied", "no", 403)
    aws.answer_every_group(opts, lambda action, arns: "allowed")
    (finding,) = permissions.check_deploy_permissions(aws.clients(), opts)
    assert finding.status == pf.OK
    assert {r["PolicySourceArn"] for r in aws.simulated} == {
        "arn:aws:iam::123456789012:role/AWSReservedSSO_Deploy_0a1b"
    }


def test_the_root_user_is_warned_and_not_simulated(aws: Aws) -> None:
    aws.caller("arn:aws:iam::123456789012:root")
    (finding,) = permissions.check_deploy_permissions(aws.clients(), options())
    assert finding.status == pf.WARN
    assert "root user" in finding.detail
    assert aws.simulated == []


def test_a_federated_user_cannot_be_simulated(aws: Aws) -> None:
    aws.caller("arn:aws:sts::123456789012:federated-user/bob")
    (finding,) = permissions.check_deploy_permissions(aws.clients(), options())
    assert finding.status == pf.WARN
    assert "could not check" in finding.detail


def test_no_credentials_is_reported_as_such(aws: Aws) -> None:
    aws.sts_stub.add_client_error("get_caller_identity", "ExpiredToken", "expired", 403)
    (finding,) = permissions.check_deploy_permissions(aws.clients(), options())
    assert (finding.status, finding.check) == (pf.FAIL, "credentials")
