"""Whether the caller may deploy: IAM's policy simulator, asked about every action of the deploy
policy (webhook_inbox_tools.deploy_policy) on the resources that policy names for this stack.

The simulator evaluates the principal's identity policies and permissions boundary; it cannot
see a session policy of the current session, and a federated user has no principal to ask
about. A call preflight may not make is reported as a check it could not do, never as a reason
the deploy would fail.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from webhook_inbox_tools import deploy_policy
from webhook_inbox_tools.cli.preflight.common import (
    FAIL,
    OK,
    WARN,
    Clients,
    Finding,
    Options,
    could_not_check,
    is_access_denied,
)

CHECK = "deploy permissions"
HANDLERS = ("create", "read", "update", "delete")
# The simulator's answers for an action: anything but "allowed" is a denial (implicitDeny:
# nothing grants it; explicitDeny: a Deny statement or a boundary refuses it).
ALLOWED = "allowed"
ASSUMED_ROLE = re.compile(
    r"^arn:(?P<partition>[^:]+):sts::(?P<account>\d+):assumed-role/(?P<role>[^/]+)/"
)
STS_USER = re.compile(r"^arn:(?P<partition>[^:]+):sts::(?P<account>\d+):user/(?P<user>.+)$")
NAMES_SHOWN = 12


def check_deploy_permissions(aws: Clients, opts: Options) -> list[Finding]:
    try:
        identity = aws.sts.get_caller_identity()
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [could_not_check(CHECK, exc, "sts:GetCallerIdentity", aws.region, required=False)]
    caller, account = str(identity["Arn"]), str(identity["Account"])
    if caller.endswith(":root"):
        return [
            Finding(
                WARN,
                CHECK,
                "signed in as the account's root user: every action is allowed",
                "deploy with a role or user that has infra/deploy-policy.json and "
                "infra/deploy-policy-2.json attached instead of the root user",
            )
        ]
    principal = _principal(aws, caller)
    if principal is None:
        return [
            Finding(
                WARN,
                CHECK,
                f"could not check: {caller} is not a principal IAM's simulator can evaluate",
                "run preflight as the IAM role or user that deploys",
            )
        ]
    try:
        denied = _denied_actions(aws, principal, opts, account)
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        if is_access_denied(exc):
            return [
                Finding(
                    WARN,
                    CHECK,
                    f"could not check whether {principal} may deploy: it may not ask IAM's "
                    "policy simulator about itself (iam:SimulatePrincipalPolicy); this says "
                    "nothing about the deploy itself",
                    "allow it iam:SimulatePrincipalPolicy on itself to have preflight check",
                )
            ]
        return [
            could_not_check(CHECK, exc, "iam:SimulatePrincipalPolicy", aws.region, required=False)
        ]
    return [_verdict(principal, denied, len(_required(opts, account)), opts)]


def _verdict(principal: str, denied: set[str], total: int, opts: Options) -> Finding:
    if not denied:
        return Finding(OK, CHECK, f"{principal} is allowed all {total} actions the deploy needs")
    shown = sorted(denied)[:NAMES_SHOWN]
    more = f" and {len(denied) - len(shown)} more" if len(denied) > len(shown) else ""
    return Finding(
        FAIL,
        CHECK,
        f"{principal} is not allowed {len(denied)} of the {total} actions the deploy "
        f"needs: {', '.join(shown)}{more}",
        "attach infra/deploy-policy.json and infra/deploy-policy-2.json to it (written "
        f"for the stack webhook-inbox; for {opts.stack_name} put its name there in their "
        "Resource ARNs); docs/deploy.md, 'The deploy principal's permissions'",
    )


def _principal(aws: Clients, caller: str) -> str | None:
    """The IAM ARN the simulator takes for the caller's STS ARN: an assumed role's role (with
    its path, which the STS ARN leaves out: AWS SSO's roles live under one), a user as is."""
    if (found := ASSUMED_ROLE.match(caller)) is not None:
        try:
            return str(aws.iam.get_role(RoleName=found["role"])["Role"]["Arn"])
        except Exception:  # noqa: BLE001 - unreadable: the path-less ARN, right for most roles
            return f"arn:{found['partition']}:iam::{found['account']}:role/{found['role']}"
    if (found := STS_USER.match(caller)) is not None:  # emulators answer in this form
        return f"arn:{found['partition']}:iam::{found['account']}:user/{found['user']}"
    if ":iam::" in caller and (":user/" in caller or ":role/" in caller):
        return caller
    return None


def _required(opts: Options, account: str) -> dict[str, tuple[str, ...]]:
    """Each action the deploy needs -> the resources to ask about: those of the policy's first
    statement that grants it, in this region and account."""
    data = deploy_policy.resource_actions()
    actions = {a for actions in data["deploy_tools"].values() for a in actions}
    for entry in data["resource_types"].values():
        for handler in HANDLERS:
            actions.update(entry.get(handler, []))
    statements = deploy_policy.statements(opts.stack_name)
    required = {}
    for action in sorted(actions):
        for statement in statements:
            if deploy_policy.granted(action, statement["Action"]):
                required[action] = tuple(
                    _here(arn, opts.region, account) for arn in statement["Resource"]
                )
                break
    return required


def _here(arn: str, region: str, account: str) -> str:
    if arn == "*":
        return arn
    parts = arn.split(":", 5)
    if parts[3] == "*":
        parts[3] = region
    if parts[4] == "*":
        parts[4] = account
    return ":".join(parts)


def _denied_actions(aws: Clients, principal: str, opts: Options, account: str) -> set[str]:
    by_resources: dict[tuple[str, ...], list[str]] = {}
    for action, arns in _required(opts, account).items():
        by_resources.setdefault(arns, []).append(action)
    denied: set[str] = set()
    for arns, actions in by_resources.items():
        for result in _simulate(aws, principal, actions, arns):
            if not _allowed(result):
                denied.add(str(result["EvalActionName"]))
    return denied


def _simulate(
    aws: Clients, principal: str, actions: list[str], arns: Iterable[str]
) -> Iterable[dict[str, Any]]:
    """Every result, page by page (the simulator truncates long answers and hands a Marker)."""
    request: dict[str, Any] = {
        "PolicySourceArn": principal,
        "ActionNames": actions,
        "ResourceArns": list(arns),
    }
    while True:
        page = aws.iam.simulate_principal_policy(**request)
        yield from page["EvaluationResults"]
        if not page.get("IsTruncated"):
            return
        request["Marker"] = page["Marker"]


def _allowed(result: dict[str, Any]) -> bool:
    per_resource = result.get("ResourceSpecificResults") or []
    if per_resource:
        return all(r["EvalResourceDecision"] == ALLOWED for r in per_resource)
    return bool(result["EvalDecision"] == ALLOWED)
