"""template.yaml against the code: handlers, environment, IAM, queue settings, metrics, alarms.

Facts come from the template and from the code's AST, not from lists kept here, so these tests
keep checking as the functions land. While a function's app.py is still the foundation's stub
(its handler only raises NotImplementedError), the checks that need its real code accept what
the template sets ahead of it, and say so in their assertion messages.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.infra_support import (
    ROOT,
    Resolver,
    boto3_usage,
    emf_metric_names,
    function_dir,
    function_entry,
    imports_module,
    is_placeholder,
    load_template,
    metric_filters,
    module_closure,
    parameter_defaults,
    policy_actions,
    resources_of_type,
    runs_in_the_vpc,
    serverless_functions,
    settings_variables,
    translated_template,
    unset_by_design,
)
from webhook_inbox.settings import ProcessorSettings

FUNCTIONS = serverless_functions()
FUNCTION_NAMES = sorted(FUNCTIONS)
LAYER_DIR = ROOT / "layers" / "shared"
APPLICATION_DIR = ROOT / "application"
# The functions that run the application's code (handlers, its migrations) get its layer.
APPLICATION_FUNCTIONS = {"ProcessorFunction", "MigrationsFunction"}

# Read by the code but legitimately not set by the template.
LOCAL_ONLY_ENV = {
    "DATABASE_URL": "local development and tests; deployed functions use DATABASE_SECRET_ARN",
    "PROVIDERS_CONFIG_FILE": "local alternative to PROVIDERS_CONFIG",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "set by Lambda itself: the function's MemorySize",
}
# Set by the template, read by the Powertools library rather than by our code.
LIBRARY_ENV_PREFIXES = ("POWERTOOLS_",)
LIBRARY_ENV = {
    "AWS_ENDPOINT_URL": "botocore; empty when deployed, a local stack's under sam local invoke",
    "AWS_USE_DUALSTACK_ENDPOINT": "botocore; true in the stack's own (IPv6-egress) network",
}

# Actions a function's role needs that no boto3 call in its code makes.
ACTIONS_NOT_CALLED_BY_CODE = {
    # SQS encrypted with the app key: SQS itself uses the key on the caller's behalf.
    "kms:Decrypt": "SQS, SNS and Secrets Manager decrypt with the app key for the caller",
    "kms:GenerateDataKey": "SQS and SNS encrypt with the app key for the caller",
    # The Lambda event source mapping polls with the function's role.
    "sqs:ReceiveMessage": "SQS event source mapping",
    "sqs:DeleteMessage": "SQS event source mapping",
    "sqs:GetQueueAttributes": "SQS event source mapping",
    "sqs:ChangeMessageVisibility": "SQS event source mapping (partial batch responses)",
}
ESM_ONLY_FUNCTIONS = {"ProcessorFunction"}  # only these may hold the event-source actions
# Granted to one function only, for a reason no call shows.
ACTIONS_FOR_ONE_FUNCTION = {
    # S3 answers a GET of a missing key with 404 only to a caller that may list the bucket
    # (403 otherwise): the sweeper must tell "no activity yet" from "unreadable".
    "s3:ListBucket": "SweeperFunction",
}
# Calls a function's code can make but its level never does: the operator functions share one
# code, and the read level refuses an act command before any call (operations.commands.run).
NOT_AT_THIS_LEVEL = {
    "OperatorReadFunction": {
        "sqs:SendMessage": "a replay's wake-ups: act level only",
        "s3:PutObject": "the idle ledger's activity mark: the act level's writes only",
    },
}
# A function with a role of its own writes its logs with it (SAM's roles get a managed policy).
OWN_LOG_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents"}
SPECIAL_METHODS = {"generate_db_auth_token": "rds-db:connect"}  # presigned locally, no API call
# IAM authorises SQS and SNS batch calls with the single-message action.
IAM_ACTION_OF_API = {
    "sns:PublishBatch": "sns:Publish",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}

# Which function's work each metric counts (the project's metric contract, namespace
# WebhookInbox): as EMF in its code, or by a metric filter on its log group.
METRIC_OWNERS = {
    "IngestFunction": {
        "Accepted", "Duplicate", "Rejected", "RejectedByProvider", "StoreUnavailable",
        "SecretUnavailable", "EnqueueFailed", "InternalErrors", "ProvidersRefreshFailed",
        "VerifiedDeliveries", "DeliveryRefused",
        "SenderUnavailable",
    },
    "ProcessorFunction": {
        "Processed", "Failed", "Retried", "DeadLettered", "Ignored", "ProcessingLatency", "Held",
        "Paced", "SecretUnavailable",
    },
    "SweeperFunction": {
        "LeasesExpired", "Reenqueued", "OutboxPublished", "OutboxFailed", "OutboxDead",
        "BacklogCount", "OldestUnprocessedAgeSeconds", "OldestOutboxAgeSeconds",
        "DeadLetteredEvents", "EnqueueFailed", "DeadLettered", "SecretUnavailable",
        "ProvidersRefreshFailed", "ProvidersWithoutLiveSecret",
        "HeldEvents", "OldestHeldAgeSeconds", "OpenCircuits", "OldestPauseAgeHours",
        "HeldReleased", "ProbesSent", "StoreUnavailable",
    },
}  # fmt: skip


def closure(name: str) -> list[Path]:
    entry, _ = function_entry(FUNCTIONS[name])
    return module_closure(entry)


def reaches_the_database(name: str) -> bool:
    return imports_module(closure(name), "webhook_inbox.store.db")


def imports_powertools(name: str) -> bool:
    return imports_module(closure(name), "aws_lambda_powertools")


def placeholder(name: str) -> bool:
    entry, attribute = function_entry(FUNCTIONS[name])
    return is_placeholder(entry, attribute)


def existing_database_resolver() -> Resolver:
    params = parameter_defaults()
    params["DatabaseSecretArn"] = "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbCdEf"
    refs = {name: f"<{name}>" for name in load_template()["Resources"]}
    return Resolver(params, refs)


# --- handlers and packaging --------------------------------------------------------------


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_handler_resolves_to_a_callable_with_the_layer_on_the_path(name: str) -> None:
    """What the Lambda runtime does: CodeUri and the layer on sys.path, import, getattr."""
    module, attribute = str(FUNCTIONS[name]["Handler"]).rsplit(".", 1)
    layers = [str(LAYER_DIR)]
    if {"Ref": "ApplicationLayer"} in FUNCTIONS[name]["Layers"]:
        layers.append(str(APPLICATION_DIR))
    probe = (
        "import importlib, sys\n"
        f"sys.path[:0] = [{str(function_dir(FUNCTIONS[name]))!r}, *{layers!r}]\n"
        f"handler = getattr(importlib.import_module({module!r}), {attribute!r})\n"
        "assert callable(handler), handler\n"
        "import webhook_inbox\n"
        f"assert webhook_inbox.__file__.startswith({str(LAYER_DIR)!r}), webhook_inbox.__file__\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_function_runs_python313_arm64_with_the_shared_layer_and_no_own_dependencies(
    name: str,
) -> None:
    props = FUNCTIONS[name]
    assert props["Runtime"] == "python3.13"
    assert props["Architectures"] == ["arm64"]
    assert {"Ref": "SharedLayer"} in props["Layers"]
    code_dir = function_dir(props)
    assert not (code_dir / "requirements.txt").exists(), "dependencies belong in the layer"
    extra = sorted(p.name for p in code_dir.iterdir() if p.name not in {"app.py", "__pycache__"})
    assert extra == [], f"{code_dir} should hold only its entry point"


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_only_the_functions_that_run_the_application_get_its_layer(name: str) -> None:
    has_it = {"Ref": "ApplicationLayer"} in FUNCTIONS[name]["Layers"]
    assert has_it == (name in APPLICATION_FUNCTIONS)


def test_application_layer_is_built_by_its_makefile_for_arm64() -> None:
    layer = load_template()["Resources"]["ApplicationLayer"]
    assert layer["Properties"]["ContentUri"] == "application/"
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
    makefile = (APPLICATION_DIR / "Makefile").read_text()
    assert "build-ApplicationLayer:" in makefile
    assert "unchecked-hash" in makefile


def test_layer_is_built_by_its_makefile_for_arm64() -> None:
    layer = load_template()["Resources"]["SharedLayer"]
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
    makefile = (LAYER_DIR / "Makefile").read_text()
    assert "build-SharedLayer:" in makefile
    for needed in (
        "compileall",
        "unchecked-hash",
        "manylinux2014_aarch64",
        "--python-version 3.13",
    ):
        assert needed in makefile


# --- environment -------------------------------------------------------------------------


# A function's settings are frozen objects whose fields name their variables
# (webhook_inbox.config.setting); the ones its code defines are the ones it reads.


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_every_settings_field_is_set_by_the_template(name: str) -> None:
    read = settings_variables(closure(name))
    template_sets = set(FUNCTIONS[name]["Environment"]["Variables"])
    if template_sets:  # proof the settings are found (one function has no environment)
        assert read, f"{name}: its code defines no settings at all"
    missing = read - template_sets - set(LOCAL_ONLY_ENV) - unset_by_design(FUNCTIONS[name])
    assert missing == set(), f"{name} reads {sorted(missing)} but template.yaml does not set them"


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_functions_in_the_stacks_own_network_connect_over_ipv6_only(name: str) -> None:
    """NETWORK_IP_FAMILY is "ipv6" exactly where botocore uses the dual-stack endpoints: the
    stack's own network, whose only way out is IPv6; a function outside the VPC has neither."""
    variables = FUNCTIONS[name]["Environment"]["Variables"]
    if not runs_in_the_vpc(FUNCTIONS[name]):
        assert "NETWORK_IP_FAMILY" not in variables
        return
    assert variables["NETWORK_IP_FAMILY"] == {"Fn::If": ["CreateNetwork", "ipv6", ""]}
    assert variables["AWS_USE_DUALSTACK_ENDPOINT"] == {"Fn::If": ["CreateNetwork", "true", ""]}


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_every_variable_the_template_sets_is_a_settings_field(name: str) -> None:
    read = settings_variables(closure(name))
    unread = {
        var
        for var in FUNCTIONS[name]["Environment"]["Variables"]
        if var not in read and not var.startswith(LIBRARY_ENV_PREFIXES) and var not in LIBRARY_ENV
    }
    assert unread == set(), f"{name}: template.yaml sets {sorted(unread)}, which nothing reads"


def test_metrics_namespace_is_the_projects() -> None:
    emitting = [name for name in FUNCTION_NAMES if imports_powertools(name)]
    assert len(emitting) >= 3
    for name in emitting:
        variables = FUNCTIONS[name]["Environment"]["Variables"]
        assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "WebhookInbox"


# --- IAM -----------------------------------------------------------------------------------


def required_actions(name: str) -> set[str]:
    usage = boto3_usage(closure(name))
    required = {SPECIAL_METHODS[m] for m in usage.called_methods if m in SPECIAL_METHODS}
    for service in usage.services:
        client = boto3.client(service, region_name="us-east-1")  # offline: builds the model only
        mapping = client.meta.method_to_api_mapping
        required |= {f"{service}:{mapping[m]}" for m in usage.called_methods if m in mapping}
    return {IAM_ACTION_OF_API.get(action, action) for action in required}


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_every_aws_call_in_the_code_is_allowed_by_the_functions_policy(name: str) -> None:
    required = required_actions(name)
    if reaches_the_database(name) and not placeholder(name):
        # A function that reaches the database does so through db.py, whose credentials module
        # reads its secret: proof that the scan follows the function's imports into the layer.
        assert "secretsmanager:GetSecretValue" in required
    assert required or placeholder(name), f"{name}: the scan found no AWS call at all"
    missing = required - policy_actions(FUNCTIONS[name]) - set(NOT_AT_THIS_LEVEL.get(name, {}))
    assert missing == set(), f"{name} calls {sorted(missing)} without permission"


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_the_policy_grants_nothing_the_code_does_not_use(name: str) -> None:
    granted = policy_actions(FUNCTIONS[name])
    unused = granted - required_actions(name)
    allowed = {
        action
        for action in unused
        if action in ACTIONS_NOT_CALLED_BY_CODE
        and (not action.startswith("sqs:") or name in ESM_ONLY_FUNCTIONS)
    } | (unused & OWN_LOG_ACTIONS if "Role" in FUNCTIONS[name] else set())
    allowed |= {a for a in unused if ACTIONS_FOR_ONE_FUNCTION.get(a) == name}
    unexplained = unused - allowed
    if placeholder(name):
        unexplained = set()  # its calls are not written yet; checked once it lands
    assert unexplained == set(), f"{name} is granted {sorted(unexplained)} but never calls them"
    assert not any(action.endswith(":*") or action == "*" for action in granted)


# --- queue, schedule, API (DESIGN §6) -------------------------------------------------------


def test_queue_outlasts_the_processor_and_redrives_to_a_dlq() -> None:
    resolver = existing_database_resolver()
    queue = load_template()["Resources"]["ProcessingQueue"]["Properties"]
    dlq = load_template()["Resources"]["ProcessingDeadLetterQueue"]["Properties"]
    processor = FUNCTIONS["ProcessorFunction"]
    assert int(queue["VisibilityTimeout"]) >= 6 * int(processor["Timeout"])
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["ProcessingDeadLetterQueue", "Arn"]
    }
    assert 1 < int(queue["RedrivePolicy"]["maxReceiveCount"]) <= 10
    assert int(dlq["MessageRetentionPeriod"]) > int(queue["MessageRetentionPeriod"])
    for props in (queue, dlq):
        assert "KmsMasterKeyId" in props  # checkov CKV_AWS_27: managed SSE alone fails it

    (source,) = [e for e in processor["Events"].values() if e["Type"] == "SQS"]
    settings = source["Properties"]
    assert settings["Queue"] == {"Fn::GetAtt": ["ProcessingQueue", "Arn"]}
    assert settings["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 1 <= int(settings["BatchSize"]) <= 10
    concurrency = int(resolver.resolve(settings["ScalingConfig"]["MaximumConcurrency"]))
    assert 2 <= concurrency <= 10, "protect the database: a few processors at a time"
    assert "ReservedConcurrentExecutions" not in processor  # throttled receives burn retries


def test_sweeper_runs_every_minute_and_ends_before_the_next_tick() -> None:
    sweeper = FUNCTIONS["SweeperFunction"]
    (schedule,) = [e for e in sweeper["Events"].values() if e["Type"] == "Schedule"]
    assert schedule["Properties"]["Schedule"] == "rate(1 minute)"
    assert int(sweeper["Timeout"]) < 60


def test_ingest_answers_within_provider_timeouts_behind_a_throttled_api() -> None:
    """The route itself (either endpoint) is checked in test_endpoints.py."""
    ingest = FUNCTIONS["IngestFunction"]
    assert int(ingest["Timeout"]) < 10  # GitHub gives 10 s
    api = load_template()["Resources"]["HttpApi"]["Properties"]
    assert {"ThrottlingRateLimit", "ThrottlingBurstLimit"} <= set(api["DefaultRouteSettings"])
    assert "$context.requestId" in api["AccessLogSettings"]["Format"]


def test_the_schema_custom_resource_reruns_when_a_layer_with_migrations_changes() -> None:
    """CloudFormation sends the custom resource an Update only when one of its properties
    changes: every layer the migrations come from must be one (the runtime's migrations ship in
    SharedLayer, the application's in ApplicationLayer). Otherwise a deploy that adds only an
    application migration skips it, and the processor runs handlers for tables not there yet."""
    schema = load_template()["Resources"]["DatabaseSchema"]["Properties"]
    assert schema["ServiceToken"] == {"Fn::GetAtt": ["MigrationsFunction", "Arn"]}
    watched = [value for value in schema.values() if isinstance(value, dict) and "Ref" in value]
    for layer in FUNCTIONS["MigrationsFunction"]["Layers"]:
        assert layer in watched, f"a new version of {layer['Ref']} does not re-run migrations"
    assert int(schema["ServiceTimeout"]) > int(FUNCTIONS["MigrationsFunction"]["Timeout"])


# --- alarms, dashboard, suppressions ---------------------------------------------------------

QUERY_METRIC = re.compile(r"\b(?:SUM|MAX|MIN|AVG|COUNT)\((\w+)\)\s+FROM\s+(\w+)")


def metrics_used_by_template() -> set[tuple[str, str]]:
    """(metric, namespace) of every custom metric a Metrics Insights query or an alarm's
    MetricStat reads."""
    resources = load_template()["Resources"]
    used = set(QUERY_METRIC.findall(json.dumps(resources)))
    for alarm in resources_of_type("AWS::CloudWatch::Alarm").values():
        for query in alarm["Properties"].get("Metrics", []):
            metric = query.get("MetricStat", {}).get("Metric", {})
            if metric and metric["Namespace"] != "AWS/Lambda":
                used.add((metric["MetricName"], metric["Namespace"]))
    return used


def log_group_of(function: str) -> str:
    return str(FUNCTIONS[function]["LoggingConfig"]["LogGroup"]["Ref"])


def produced_metrics() -> dict[str, set[str]]:
    """metric -> how it is produced: ``emf:<Function>`` or ``filter:<Function>``."""
    found: dict[str, set[str]] = {}
    for function in FUNCTION_NAMES:
        for metric in emf_metric_names(closure(function)):
            found.setdefault(metric, set()).add(f"emf:{function}")
    groups = {log_group_of(f): f for f in FUNCTION_NAMES}
    for metric_filter in metric_filters():
        assert metric_filter.namespace == "WebhookInbox", metric_filter
        function = groups[metric_filter.log_group]
        found.setdefault(metric_filter.metric, set()).add(f"filter:{function}")
    return found


def test_every_metric_an_alarm_or_widget_uses_is_produced_by_emf_or_a_metric_filter() -> None:
    used = metrics_used_by_template()
    assert {namespace for _, namespace in used} == {"WebhookInbox"}
    produced = produced_metrics()
    owners = {metric for metrics in METRIC_OWNERS.values() for metric in metrics}
    unknown = {metric for metric, _ in used} - owners
    assert unknown == set(), f"the template queries metrics outside the contract: {unknown}"
    for metric, _ in used:
        assert produced.get(metric), f"neither EMF in the code nor a metric filter makes {metric}"
        makers = {how.split(":", 1)[1] for how in produced[metric]}
        assert makers <= {fn for fn, metrics in METRIC_OWNERS.items() if metric in metrics}, (
            metric,
            produced[metric],
        )


def test_no_function_counts_a_metric_both_as_emf_and_through_a_metric_filter() -> None:
    """Ingest's counters moved to metric filters: an EMF copy left behind would count twice."""
    for metric, ways in produced_metrics().items():
        for function in FUNCTION_NAMES:
            assert not {f"emf:{function}", f"filter:{function}"} <= ways, (metric, function)
    filtered = {f.metric for f in metric_filters() if f.log_group == log_group_of("IngestFunction")}
    assert filtered == METRIC_OWNERS["IngestFunction"]
    assert not emf_metric_names(closure("IngestFunction")) & filtered


def test_metric_filters_use_bounded_dimensions_and_the_service_one() -> None:
    """A filter creating over 1000 dimension combinations is disabled by CloudWatch: only
    fields with a few values (provider: configured names only; reason: the error set)."""
    for metric_filter in metric_filters():
        assert metric_filter.dimensions.get("service") == "$.service", metric_filter
        assert set(metric_filter.dimensions) <= {"service", "provider", "reason"}, metric_filter
        assert len(metric_filter.dimensions) <= 3  # CloudWatch's limit per filter


ROLLBACK_TRIGGERS = {"IngestCanaryErrorsAlarm", "ProcessorCanaryErrorsAlarm"}


@pytest.mark.parametrize("name", ["IngestFunction", "ProcessorFunction"])
def test_a_deploy_shifts_traffic_gradually_and_rolls_back_on_its_own_versions_errors(
    name: str,
) -> None:
    """The endpoint and the queue call the alias; CodeDeploy moves it as DeploymentType says and
    back when the alarm on the new version's own errors (not the function's) fires."""
    props = FUNCTIONS[name]
    assert props["AutoPublishAlias"] == "live"
    assert props["DeploymentPreference"]["Type"] == {"Ref": "DeploymentType"}
    # The alarm exists (and is watched) only when traffic shifts in steps: AllAtOnce has no
    # canary to judge.
    condition, [trigger], none = props["DeploymentPreference"]["Alarms"]["Fn::If"]
    assert (condition, none) == ("GradualDeploys", [])
    alarm_name = trigger["Ref"]
    assert alarm_name in ROLLBACK_TRIGGERS
    translated = translated_template()["Resources"]
    dimensions = {d["Name"]: d["Value"] for d in translated[alarm_name]["Properties"]["Dimensions"]}
    # The version this deploy publishes (SAM's generated Version resource of the function).
    version, attribute = dimensions["ExecutedVersion"]["Fn::GetAtt"]
    assert attribute == "Version"
    assert translated[version]["Type"] == "AWS::Lambda::Version"
    assert translated[version]["Properties"]["FunctionName"] == {"Ref": name}
    assert dimensions["Resource"] == {"Fn::Sub": f"${{{name}}}:live"}
    alias = f"{name}Aliaslive"
    assert translated[alias]["Type"] == "AWS::Lambda::Alias"
    callers = {
        key: json.dumps(resource["Properties"])
        for key, resource in translated.items()
        if resource["Type"]
        in {"AWS::Lambda::Permission", "AWS::Lambda::Url", "AWS::Lambda::EventSourceMapping"}
        and name in json.dumps(resource["Properties"])
    }
    if name == "ProcessorFunction":
        callers = {
            k: v for k, v in callers.items() if "EventSourceMapping" in translated[k]["Type"]
        }
    assert callers, name
    for key, text in callers.items():
        assert alias in text or '"Qualifier": "live"' in text, key
    if name == "IngestFunction":
        route = json.dumps(translated["HttpApi"]["Properties"]["Body"])
        assert "IngestFunctionAliaslive" in route


def test_every_alarm_notifies_the_topic_and_links_its_runbook_entry() -> None:
    runbook = (ROOT / "infra" / "RUNBOOK.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in runbook.splitlines()
        if line.startswith("## ")
    }
    alarms = resources_of_type("AWS::CloudWatch::Alarm")
    assert len(alarms) >= 8
    composites = resources_of_type("AWS::CloudWatch::CompositeAlarm")
    # An alarm a composite alarm names pages through it (one cause, one page), not on its own.
    parts = {
        name
        for composite in composites.values()
        for name in re.findall(r"\$\{(\w+)\.Arn\}", composite["Properties"]["AlarmRule"]["Fn::Sub"])
    }
    assert parts <= set(alarms)
    for name, alarm in {**alarms, **composites}.items():
        props = alarm["Properties"]
        if name in ROLLBACK_TRIGGERS | parts:
            # A rollback trigger is CodeDeploy's, not the operator's: a failed canary rolls back
            # and fails the deploy; the function's errors alarm pages for the same errors.
            assert "AlarmActions" not in props, name
            assert "OKActions" not in props, name
        else:
            assert props["AlarmActions"] == [{"Ref": "AlarmTopic"}], name
            assert props["OKActions"] == [{"Ref": "AlarmTopic"}], name
        link = re.search(r"infra/RUNBOOK\.md#([a-z0-9-]+)", props["AlarmDescription"])
        assert link, f"{name}: no runbook link"
        assert link[1] in anchors, f"{name}: runbook has no entry #{link[1]}"


def test_every_checkov_suppression_says_why() -> None:
    resources: dict[str, Any] = load_template()["Resources"]
    skips = [
        (name, skip)
        for name, res in resources.items()
        for skip in res.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]
    assert skips, "expected the documented suppressions"
    for name, skip in skips:
        assert re.fullmatch(r"CKV2?_AWS_\d+", skip["id"]), (name, skip)
        assert len(skip.get("comment", "")) > 40, f"{name}: {skip['id']} needs a real reason"


def test_custom_metrics_carry_the_service_dimension_alarms_filter_on() -> None:
    """Powertools adds a `service` dimension (POWERTOOLS_SERVICE_NAME) to every metric."""
    for name in FUNCTION_NAMES:
        if imports_powertools(name):
            assert FUNCTIONS[name]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == {
                "Ref": "AWS::StackName"
            }
    for name, alarm in resources_of_type("AWS::CloudWatch::Alarm").items():
        for query in alarm["Properties"].get("Metrics", []):
            expression = json.dumps(query.get("Expression", ""))
            if "FROM WebhookInbox" in expression:
                assert "service = '${AWS::StackName}'" in expression, name
            metric = query.get("MetricStat", {}).get("Metric", {})
            if metric.get("Namespace") == "WebhookInbox":
                service = {"Name": "service", "Value": {"Ref": "AWS::StackName"}}
                assert metric["Dimensions"] == [service], name


def test_functions_that_import_powertools_get_its_settings() -> None:
    for name in FUNCTION_NAMES:
        if imports_module(closure(name), "aws_lambda_powertools"):
            assert "POWERTOOLS_SERVICE_NAME" in FUNCTIONS[name]["Environment"]["Variables"]


def test_role_timeouts_stored_on_deploy_equal_the_functions_timeouts() -> None:
    template = load_template()
    schema = template["Resources"]["DatabaseSchema"]["Properties"]
    app_env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert schema["RoleStatementTimeoutMs"] == app_env["DB_STATEMENT_TIMEOUT_MS"]
    assert schema["RoleLockTimeoutMs"] == app_env["DB_LOCK_TIMEOUT_MS"]


def test_functions_reach_a_database_the_stack_creates_only_through_its_proxy() -> None:
    """Or, with CreateDatabaseProxy=false, that instance's security group and nothing else."""
    resources = load_template()["Resources"]
    conditions = load_template()["Conditions"]
    inline = resources["FunctionSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    rules = [
        branch
        for rule in inline
        for branch in (rule["Fn::If"][1:] if "Fn::If" in rule else [rule])
        if branch != {"Ref": "AWS::NoValue"}
    ]
    assert rules
    assert all(rule["FromPort"] != 5432 for rule in rules)
    to_proxy = resources["FunctionToProxyEgress"]
    assert to_proxy["Properties"]["DestinationSecurityGroupId"] == {"Ref": "ProxySecurityGroup"}
    assert "CidrIp" not in to_proxy["Properties"]
    direct = resources["FunctionToDatabaseEgress"]
    assert direct["Properties"]["DestinationSecurityGroupId"] == {"Ref": "DatabaseSecurityGroup"}
    assert "CidrIp" not in direct["Properties"]
    assert {"Condition": "CreateDatabaseWithoutProxy"} in conditions[direct["Condition"]]["Fn::And"]
    # The open rule exists only for an existing database, never beside the stack's own.
    anywhere = resources["FunctionToPostgresEgress"]
    condition = conditions[anywhere["Condition"]]
    assert {"Fn::Not": [{"Condition": "CreateDatabase"}]} in condition["Fn::And"]


# --- logs and memory (issue 18: what a million webhooks cost) --------------------------------


@pytest.mark.parametrize("name", FUNCTION_NAMES)
def test_every_function_logs_json_with_the_stacks_levels_into_its_own_group(name: str) -> None:
    """JSON format: Lambda reads each line's level and timestamp, and SystemLogLevel can drop its
    own per-invocation lines (IngestSystemLogLevel for ingest, which writes its own evidence);
    the application level follows LogLevel (Powertools' spelling)."""
    config = FUNCTIONS[name]["LoggingConfig"]
    assert config["LogFormat"] == "JSON"
    system = "IngestSystemLogLevel" if name == "IngestFunction" else "SystemLogLevel"
    assert config["SystemLogLevel"] == {"Ref": system}
    assert config["ApplicationLogLevel"] == {
        "Fn::FindInMap": ["ApplicationLogLevels", {"Ref": "LogLevel"}, "Lambda"]
    }
    assert set(config["LogGroup"]["Ref"].split()) <= set(load_template()["Resources"])


def test_every_log_level_maps_to_a_lambda_application_log_level() -> None:
    template = load_template()
    mapping = template["Mappings"]["ApplicationLogLevels"]
    allowed = template["Parameters"]["LogLevel"]["AllowedValues"]
    assert set(mapping) == set(allowed)
    lambda_levels = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}
    assert {entry["Lambda"] for entry in mapping.values()} <= lambda_levels
    # Issue 27: no level drops a line a metric counts, or the report of a timeout / memory kill.
    assert set(allowed) == {"DEBUG", "INFO"}
    assert set(template["Parameters"]["SystemLogLevel"]["AllowedValues"]) == {"DEBUG", "INFO"}
    # Ingest's evidence of a timeout or a memory limit is its own lines, kept at every level.
    ingest = template["Parameters"]["IngestSystemLogLevel"]
    assert (ingest["Default"], set(ingest["AllowedValues"])) == ("WARN", {"WARN", "INFO", "DEBUG"})


@pytest.mark.parametrize(
    ("name", "parameter"),
    [
        ("IngestFunction", "IngestMemorySize"),
        ("ProcessorFunction", "ProcessorMemorySize"),
        ("SweeperFunction", "SweeperMemorySize"),
    ],
)
def test_memory_is_a_parameter_per_function_documented_in_the_benchmarks(
    name: str, parameter: str
) -> None:
    assert FUNCTIONS[name]["MemorySize"] == {"Ref": parameter}
    spec = load_template()["Parameters"][parameter]
    assert spec["MinValue"] == 128
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    assert parameter in benchmarks, f"docs/benchmarks.md should say how {parameter} was chosen"


def _deploy_doc_parameters() -> dict[str, str | None]:
    """docs/deploy.md's parameter table: each name with its documented default (None for "—",
    "" for "empty"); a row may name several parameters and list their defaults in order."""
    documented: dict[str, str | None] = {}
    for line in (ROOT / "docs" / "deploy.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        names_cell, defaults_cell = line.strip("|").split(" | ")[:2]
        names = re.findall(r"`(\w+)`", names_cell)
        defaults = [d.strip().strip("`") for d in defaults_cell.split(", ")]
        if len(defaults) == 1:
            defaults *= len(names)
        assert len(defaults) == len(names), f"docs/deploy.md: {line}"
        for name, default in zip(names, defaults, strict=True):
            documented[name] = {"—": None, "empty": ""}.get(default, default)
    return documented


def test_docs_deploy_lists_every_parameter_with_the_templates_default() -> None:
    documented = _deploy_doc_parameters()
    defaults = parameter_defaults()
    assert sorted(documented) == sorted(defaults)
    wrong = {
        name: (documented[name], default)
        for name, default in defaults.items()
        if documented[name] != (None if default is None else str(default))
    }
    assert wrong == {}, "docs/deploy.md default (documented, template)"


def test_processor_memory_holds_its_worst_batch_with_headroom() -> None:
    """Issue 27: ProcessorMemorySize from bench/processor_memory.py's measurement of ten
    events at MaxBodyBytes' default (docs/benchmarks.md), with room for the runtime client and
    the handlers: at least half again the measured peak. (128 MB on 5276659; the peak is 130.)"""
    defaults = parameter_defaults()
    section = (ROOT / "docs" / "benchmarks.md").read_text().split("<!-- bench:processor_memory -->")
    assert len(section) == 2, "docs/benchmarks.md has no processor_memory section"
    body = int(defaults["MaxBodyBytes"])
    row = re.search(rf"\| 10 bodies of {body:,} B \| \d+ \| (\d+) \|", section[1])
    assert row, f"no measurement for bodies of {body:,} B"
    assert int(defaults["ProcessorMemorySize"]) >= 1.5 * int(row[1])


def test_the_function_url_sizing_text_respects_lambdas_cap() -> None:
    """Issue 27: Lambda caps a Function URL at 10 requests a second per unit of reserved
    concurrency; 5276659's text promised 20 / 0.03 s = 600 deliveries a second."""
    spec = load_template()["Parameters"]["IngestReservedConcurrency"]
    cap = 10 * int(spec["Default"])
    claimed = [int(n) for n in re.findall(r"(\d+) deliveries a second", spec["Description"])]
    assert claimed == [cap], spec["Description"]
    deploy = " ".join((ROOT / "docs" / "deploy.md").read_text().split())
    assert f"({cap} a second at the default {spec['Default']})" in deploy


def test_the_processor_knows_the_queues_last_receive() -> None:
    """The processor acknowledges a message on its last receive before the redrive moves it to
    the DLQ (processing.batch.hand_back): it must count receives as the queue does."""
    queue = load_template()["Resources"]["ProcessingQueue"]["Properties"]
    variables = FUNCTIONS["ProcessorFunction"]["Environment"]["Variables"]
    assert int(variables["WAKEUP_MAX_RECEIVES"]) == queue["RedrivePolicy"]["maxReceiveCount"]
    assert ProcessorSettings().wakeup_max_receives == queue["RedrivePolicy"]["maxReceiveCount"]


def test_a_log_group_in_the_infrequent_access_class_feeds_no_metric() -> None:
    """CloudWatch Logs' Infrequent Access class extracts no metrics (no metric filters, no
    embedded metric format) and has no subscription filters or Live Tail. The API's access log
    is read only with Logs Insights, so it is there (half the ingestion price); a function's
    group is not: the processor and sweeper embed their metrics in their lines and ingest's
    lines feed metric filters."""
    resources = load_template()["Resources"]
    infrequent = {
        name
        for name, resource in resources.items()
        if resource["Type"] == "AWS::Logs::LogGroup"
        and resource["Properties"].get("LogGroupClass") == "INFREQUENT_ACCESS"
    }
    assert infrequent == {"ApiAccessLogGroup"}
    for name, resource in resources.items():
        if resource["Type"] in {"AWS::Logs::MetricFilter", "AWS::Logs::SubscriptionFilter"}:
            assert resource["Properties"]["LogGroupName"].get("Ref") not in infrequent, name
        group = resource.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup")
        assert not isinstance(group, dict) or group.get("Ref") not in infrequent, name
