"""The operator functions in template.yaml: one code deployed twice (read, act) in the stack's
VPC, each behind a Function URL with AuthType AWS_IAM and no resource policy, least-privilege
roles (only act sends to the queue), two managed policies for the operators' principals (the
stack's outputs, the URL, and Invoke only through the URL), nothing that bills at rest."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra_support import (
    STACK_KEY_OR_NONE,
    Placeholders,
    Resolver,
    dangling_references,
    load_template,
    parameter_values,
    policy_actions,
    resources_of_type,
    runs_in_the_vpc,
    serverless_functions,
    translated_template,
)

TEMPLATE = load_template()
RESOURCES = TEMPLATE["Resources"]
FUNCTIONS = serverless_functions()
LEVELS = {"OperatorReadFunction": "read", "OperatorActFunction": "act"}
URLS = {
    "OperatorReadFunction": "OperatorReadFunctionUrl",
    "OperatorActFunction": "OperatorActFunctionUrl",
}
DATABASE_ACTIONS = {"rds-db:connect", "secretsmanager:GetSecretValue", "kms:Decrypt"}


def _arn(function: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [function, "Arn"]}


@pytest.mark.parametrize("name", sorted(LEVELS))
def test_one_code_two_levels_in_the_vpc_and_idle_at_rest(name: str) -> None:
    props = FUNCTIONS[name]
    assert props["CodeUri"] == "functions/operator/"
    assert props["Handler"] == "app.handler"
    assert props["Environment"]["Variables"]["OPERATOR_LEVEL"] == LEVELS[name]
    assert runs_in_the_vpc(props)  # the database is in private subnets
    for costly in ("ProvisionedConcurrencyConfig", "ReservedConcurrentExecutions", "Events"):
        assert costly not in props, f"{name}: {costly}"
    # The act level writes the idle ledger's activity mark: deleted before the ledger's cleanup.
    expected = (
        ["DatabaseSchema", "IdleLedgerCleanup"] if LEVELS[name] == "act" else "DatabaseSchema"
    )
    assert RESOURCES[name]["DependsOn"] == expected
    group = RESOURCES[props["LoggingConfig"]["LogGroup"]["Ref"]]["Properties"]
    assert group["LogGroupName"] == {
        "Fn::Sub": f"/aws/lambda/${{AWS::StackName}}/operator-{LEVELS[name]}"
    }
    assert group["KmsKeyId"] == STACK_KEY_OR_NONE
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}


@pytest.mark.parametrize("name", sorted(LEVELS))
def test_each_is_reached_only_through_an_iam_function_url(name: str) -> None:
    url = RESOURCES[URLS[name]]["Properties"]
    assert url == {"TargetFunctionArn": _arn(name), "AuthType": "AWS_IAM"}
    # No resource policy: only this account's principals whose own policies allow it.
    for permission in resources_of_type("AWS::Lambda::Permission").values():
        assert permission["Properties"]["FunctionName"] != {"Ref": name}


def test_only_the_act_level_may_send_to_the_queue() -> None:
    read = policy_actions(FUNCTIONS["OperatorReadFunction"])
    act = policy_actions(FUNCTIONS["OperatorActFunction"])
    assert read == DATABASE_ACTIONS
    assert act == DATABASE_ACTIONS | {"sqs:SendMessage", "kms:GenerateDataKey", "s3:PutObject"}
    statements = FUNCTIONS["OperatorActFunction"]["Policies"][0]["Statement"]
    (send,) = [s for s in statements if s.get("Action") == "sqs:SendMessage"]
    assert send["Resource"] == {"Fn::GetAtt": ["ProcessingQueue", "Arn"]}
    (mark,) = [s for s in statements if s.get("Action") == "s3:PutObject"]
    assert mark["Resource"] == {"Fn::Sub": "${IdleLedger.Arn}/activity.json"}
    read_env = FUNCTIONS["OperatorReadFunction"]["Environment"]["Variables"]
    assert read_env["PROCESSING_QUEUE_URL"] == ""
    assert read_env["IDLE_LEDGER_BUCKET"] == ""  # it never writes, so never marks


@pytest.mark.parametrize(
    ("policy", "functions"),
    [
        ("OperatorReadPolicy", ["OperatorReadFunction"]),
        ("OperatorActPolicy", ["OperatorReadFunction", "OperatorActFunction"]),
    ],
)
def test_the_operators_policies_grant_the_outputs_and_the_urls_and_nothing_else(
    policy: str, functions: list[str]
) -> None:
    resource = RESOURCES[policy]
    assert resource["Type"] == "AWS::IAM::ManagedPolicy"
    statements = resource["Properties"]["PolicyDocument"]["Statement"]
    by_action = {s["Action"]: s for s in statements}
    assert set(by_action) == {
        "cloudformation:DescribeStacks",
        "lambda:InvokeFunctionUrl",
        "lambda:InvokeFunction",
    }
    assert all(s["Effect"] == "Allow" for s in statements)
    assert by_action["cloudformation:DescribeStacks"]["Resource"] == {"Ref": "AWS::StackId"}
    targets = [_arn(f) for f in functions]
    for action in ("lambda:InvokeFunctionUrl", "lambda:InvokeFunction"):
        granted = by_action[action]["Resource"]
        assert (granted if isinstance(granted, list) else [granted]) == targets, (policy, action)
    assert by_action["lambda:InvokeFunctionUrl"]["Condition"] == {
        "StringEquals": {"lambda:FunctionUrlAuthType": "AWS_IAM"}
    }
    # A direct Invoke would hand the function an event whose caller anyone could write.
    assert by_action["lambda:InvokeFunction"]["Condition"] == {
        "Bool": {"lambda:InvokedViaFunctionUrl": "true"}
    }


def test_the_stack_outputs_the_urls_and_the_policies() -> None:
    outputs = TEMPLATE["Outputs"]
    assert outputs["OperatorReadUrl"]["Value"] == {
        "Fn::GetAtt": ["OperatorReadFunctionUrl", "FunctionUrl"]
    }
    assert outputs["OperatorActUrl"]["Value"] == {
        "Fn::GetAtt": ["OperatorActFunctionUrl", "FunctionUrl"]
    }
    assert outputs["OperatorReadPolicyArn"]["Value"] == {"Ref": "OperatorReadPolicy"}
    assert outputs["OperatorActPolicyArn"]["Value"] == {"Ref": "OperatorActPolicy"}
    for name in (
        "OperatorReadUrl",
        "OperatorActUrl",
        "OperatorReadPolicyArn",
        "OperatorActPolicyArn",
    ):
        assert outputs[name]["Condition"] == "HasOperatorFunctions"


def test_everything_of_the_operator_goes_with_its_parameter_on_by_default() -> None:
    """Off only where Lambda has no Function URLs (the stack would not deploy there)."""
    spec = TEMPLATE["Parameters"]["CreateOperatorFunctions"]
    assert (spec["Default"], spec["AllowedValues"]) == ("true", ["true", "false"])
    assert TEMPLATE["Conditions"]["HasOperatorFunctions"] == {
        "Fn::Equals": [{"Ref": "CreateOperatorFunctions"}, "true"]
    }
    operator = {name for name in RESOURCES if name.startswith("Operator")}
    assert len(operator) == 9
    for name in operator:
        assert RESOURCES[name]["Condition"] == "HasOperatorFunctions", name


@pytest.mark.parametrize("translated", [False, True], ids=["template", "translated"])
def test_without_them_nothing_refers_to_them(translated: bool) -> None:
    template = translated_template() if translated else load_template()
    off = Resolver(parameter_values(CreateOperatorFunctions="false"), Placeholders())
    assert dangling_references(template, off) == []


def test_an_error_of_either_function_pages_operator_errors() -> None:
    alarm = RESOURCES["OperatorErrorsAlarm"]["Properties"]
    watched = {
        query["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Ref"]
        for query in alarm["Metrics"]
        if "MetricStat" in query
    }
    assert watched == set(LEVELS)
    assert {
        q["MetricStat"]["Metric"]["MetricName"] for q in alarm["Metrics"] if "MetricStat" in q
    } == {"Errors"}
    assert "#function-errors" in alarm["AlarmDescription"]
