"""With ``Endpoint=FunctionUrl``: does an organisation policy deny a public Function URL?

Many organisations forbid URLs with ``AuthType NONE`` through a service control policy (a Deny of
``lambda:CreateFunctionUrlConfig`` on the condition ``lambda:FunctionUrlAuthType``); the create
then fails, late, and the stack rolls back. The policies are readable only from the management
account or a delegated administrator: from a member account preflight can say that it could not
read them, and what to ask.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from typing import Any

from webhook_inbox_tools.cli.preflight.common import (
    FAIL,
    OK,
    WARN,
    Clients,
    Finding,
    Options,
    error_code,
    is_access_denied,
)

CHECK = "organisation policy"
# The calls that create the stack's public URL and its resource-based permission.
URL_ACTIONS = (
    "lambda:CreateFunctionUrlConfig",
    "lambda:UpdateFunctionUrlConfig",
    "lambda:AddPermission",
)
NOT_IN_ORGANIZATION = "AWSOrganizationsNotInUseException"
USE_HTTP_API = "deploy with Endpoint=HttpApi (nothing public is created in Lambda)"


def check_function_url_policy(aws: Clients, opts: Options) -> list[Finding]:
    if opts.endpoint != "FunctionUrl":
        return []
    try:
        policies = _policies_over_account(aws)
    except Exception as exc:  # noqa: BLE001 - reading SCPs is a privilege most accounts lack
        return [_unreadable(exc)]
    if policies is None:
        return [Finding(OK, CHECK, "the account is in no organisation: no SCP can deny the URL")]
    denying = [
        (name, verdict)
        for name, content in policies
        if (verdict := _url_verdict(content)) != "allowed"
    ]
    findings = [
        Finding(
            FAIL if verdict == "denied" else WARN,
            CHECK,
            f"the SCP {name} "
            + ("denies" if verdict == "denied" else "may deny (under its conditions)")
            + " the public Function URL (AuthType NONE): the deploy would fail and roll back",
            f"{USE_HTTP_API}, or ask the organisation's administrators for an exception",
        )
        for name, verdict in denying
    ]
    return findings or [
        Finding(OK, CHECK, f"{len(policies)} SCPs over the account; none denies a public URL")
    ]


def _unreadable(exc: Exception) -> Finding:
    code = error_code(exc)
    why = (
        "only the management account or a delegated administrator may read them"
        if is_access_denied(exc)
        else f"{code}"
    )
    return Finding(
        WARN,
        CHECK,
        f"could not read the organisation's service control policies ({why}); if one denies "
        "lambda:CreateFunctionUrlConfig for lambda:FunctionUrlAuthType NONE, the deploy fails "
        "and rolls back",
        f"ask your administrators whether public Function URLs are allowed, or {USE_HTTP_API}",
    )


def _policies_over_account(aws: Clients) -> list[tuple[str, str]] | None:
    """(name, content) of every SCP attached to the account or above it; None outside an
    organisation."""
    try:
        aws.organizations.describe_organization()
    except Exception as exc:
        if error_code(exc) == NOT_IN_ORGANIZATION:
            return None
        raise
    target = aws.sts.get_caller_identity()["Account"]
    targets = [target]
    while True:
        parents = aws.organizations.list_parents(ChildId=target)["Parents"]
        if not parents:
            break
        target = parents[0]["Id"]
        targets.append(target)
        if parents[0]["Type"] == "ROOT":
            break
    policies = {}
    for target in targets:
        listed = aws.organizations.list_policies_for_target(
            TargetId=target, Filter="SERVICE_CONTROL_POLICY"
        )
        for summary in listed["Policies"]:
            if summary["Id"] not in policies:
                described = aws.organizations.describe_policy(PolicyId=summary["Id"])
                policies[summary["Id"]] = (
                    f"{summary['Name']} ({summary['Id']})",
                    described["Policy"]["Content"],
                )
    return list(policies.values())


def _url_verdict(content: str) -> str:
    """``denied`` when a Deny covers a URL action for AuthType NONE (or unconditionally),
    ``conditional`` when it covers one under other conditions, else ``allowed``."""
    try:
        statements = json.loads(content).get("Statement", [])
    except (ValueError, AttributeError):
        return "conditional"
    statements = [statements] if isinstance(statements, dict) else statements
    verdict = "allowed"
    for statement in statements:
        if statement.get("Effect") != "Deny" or not _covers(statement):
            continue
        condition = statement.get("Condition") or {}
        if not condition or _denies_auth_none(condition):
            return "denied"
        verdict = "conditional"
    return verdict


def _covers(statement: dict[str, Any]) -> bool:
    if "NotAction" in statement:
        excluded = statement["NotAction"]
        excluded = [excluded] if isinstance(excluded, str) else excluded
        return any(
            not any(fnmatchcase(a.lower(), str(p).lower()) for p in excluded) for a in URL_ACTIONS
        )
    actions = statement.get("Action", [])
    actions = [actions] if isinstance(actions, str) else actions
    return any(fnmatchcase(a.lower(), str(p).lower()) for a in URL_ACTIONS for p in actions)


def _denies_auth_none(condition: dict[str, Any]) -> bool:
    """The condition is only about the URL's auth type, and NONE satisfies it."""
    tests = [
        (operator, key, value)
        for operator, pairs in condition.items()
        for key, value in (pairs or {}).items()
    ]
    if not tests or any(key.lower() != "lambda:functionurlauthtype" for _, key, _ in tests):
        return False
    for operator, _, value in tests:
        values = [value] if isinstance(value, str) else list(value)
        equals = operator.startswith("StringEquals") or operator.startswith("StringLike")
        if equals != ("NONE" in values):
            return False
    return True
