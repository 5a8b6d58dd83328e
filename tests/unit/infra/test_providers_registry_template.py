"""The providers registry in template.yaml (issue 28): one secret under the stack's key, a
constant initial value a later deploy cannot overwrite, read by ingest alone, and the only
growth of any function's IAM is GetSecretValue on exactly that secret."""

from __future__ import annotations

import json
from typing import Any

from tests.infra_support import STACK_KEY_OR_NONE, load_template, serverless_functions
from webhook_inbox import settings
from webhook_inbox.ingest import provider_registry

TEMPLATE = load_template()
RESOURCES = TEMPLATE["Resources"]
REGISTRY = {"Ref": "ProvidersRegistry"}
# Ingest's statements, by Sid: the registry read is the one issue 28 added.
INGEST_SIDS = [
    "ConnectThroughRdsProxyWithIam",
    "ReadDatabaseSecret",
    "DecryptExistingDatabaseSecret",
    "ReadProviderSecrets",
    "ReadProvidersRegistry",
    "EnqueueInboxIds",
    "MarkActivity",
    "UseAppKeyForQueueSecretsAndLedger",
]


def _statements(props: dict[str, Any]) -> list[dict[str, Any]]:
    """Every statement of a function's inline policies, both branches of a condition."""
    found = []
    for policy in props.get("Policies", []):
        for statement in policy.get("Statement", []):
            branches = statement["Fn::If"][1:] if "Fn::If" in statement else [statement]
            found += [b for b in branches if isinstance(b, dict) and "Sid" in b]
    return found


def test_the_registry_is_one_secret_under_the_stacks_key_with_a_constant_initial_value() -> None:
    secrets = {
        name: r for name, r in RESOURCES.items() if r["Type"] == "AWS::SecretsManager::Secret"
    }
    assert "ProvidersRegistry" in secrets
    props = RESOURCES["ProvidersRegistry"]["Properties"]
    assert props["KmsKeyId"] == STACK_KEY_OR_NONE
    assert "Name" not in props  # CloudFormation names it: two stacks never collide
    assert "Condition" not in RESOURCES["ProvidersRegistry"]  # every deployment has one
    # A constant: an intrinsic here would change on some deploy and overwrite the commands' work.
    assert isinstance(props["SecretString"], str)
    assert json.loads(props["SecretString"]) == json.loads(provider_registry.INITIAL_TEXT)
    assert provider_registry.parse_document(props["SecretString"]).providers is None
    assert "GenerateSecretString" not in props


def test_the_stack_outputs_the_registry_for_the_commands() -> None:
    assert TEMPLATE["Outputs"]["ProvidersRegistryArn"]["Value"] == REGISTRY


def test_ingest_reads_the_registry_and_refreshes_within_the_issues_minute() -> None:
    variables = serverless_functions()["IngestFunction"]["Environment"]["Variables"]
    assert variables["PROVIDERS_REGISTRY_ARN"] == REGISTRY
    assert 0 < float(variables["PROVIDERS_REFRESH_S"]) <= 30
    # The bound the commands and docs/providers.md promise: no copy older accepts a delivery.
    assert float(variables["PROVIDERS_MAX_AGE_S"]) == settings.DEFAULT_PROVIDERS_MAX_AGE_S == 60
    assert float(variables["PROVIDERS_REFRESH_S"]) <= float(variables["PROVIDERS_MAX_AGE_S"])


def test_ingest_grows_only_by_get_secret_value_on_the_registry() -> None:
    statements = _statements(serverless_functions()["IngestFunction"])
    assert [s["Sid"] for s in statements] == INGEST_SIDS
    (read,) = [s for s in statements if s["Sid"] == "ReadProvidersRegistry"]
    assert read == {
        "Sid": "ReadProvidersRegistry",
        "Effect": "Allow",
        "Action": "secretsmanager:GetSecretValue",
        "Resource": REGISTRY,
    }
    # The stack's key decrypts it: the statement ingest already had for its queue and secrets.
    (key,) = [s for s in statements if s["Sid"] == "UseAppKeyForQueueSecretsAndLedger"]
    assert key["Resource"] == {"Fn::GetAtt": ["AppKey", "Arn"]}
    assert "kms:Decrypt" in key["Action"]


def test_only_ingest_and_the_sweeper_read_the_registry_and_nothing_may_write_it() -> None:
    readers = set()
    for name, props in serverless_functions().items():
        for statement in _statements(props):
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            assert not any(a.startswith("secretsmanager:") and "Get" not in a for a in actions)
            if statement.get("Resource") == REGISTRY:
                assert actions == ["secretsmanager:GetSecretValue"], name
                readers.add(name)
    assert readers == {"IngestFunction", "SweeperFunction"}


def test_the_sweeper_reads_the_registry_every_run_whatever_the_traffic() -> None:
    """So an unreadable registry and a provider without a live secret page at any traffic."""
    variables = serverless_functions()["SweeperFunction"]["Environment"]["Variables"]
    assert variables["PROVIDERS_REGISTRY_ARN"] == REGISTRY
    assert variables["PROVIDERS_CONFIG"] == {"Ref": "ProvidersConfig"}
    alarm = RESOURCES["ProvidersWithoutLiveSecretAlarm"]["Properties"]
    assert "MAX(ProvidersWithoutLiveSecret)" in alarm["Metrics"][0]["Expression"]["Fn::Sub"]
    assert alarm["TreatMissingData"] == "notBreaching"  # published only while it is not zero


def test_a_failed_refresh_is_counted_and_alarmed() -> None:
    metric_filter = RESOURCES["ProvidersRefreshFailedMetricFilter"]["Properties"]
    assert metric_filter["LogGroupName"] == {"Ref": "IngestLogGroup"}
    assert metric_filter["FilterPattern"] == '{ $.message = "providers_refresh_failed" }'
    alarm = RESOURCES["ProvidersRefreshFailedAlarm"]["Properties"]
    assert "SUM(ProvidersRefreshFailed)" in alarm["Metrics"][0]["Expression"]["Fn::Sub"]
    assert "#providers-refresh-failed" in alarm["AlarmDescription"]


# What holds state nothing else keeps, and what a delete or a replacement does with it.
STATEFUL_TYPES = {"AWS::SecretsManager::Secret", "AWS::KMS::Key", "AWS::RDS::DBInstance"}
# Stateful too (cfn-lint's I3011), deleted with the stack on purpose, but said so explicitly:
# the log groups are named after the stack, and the queues only point at rows.
DELETED_TYPES = {"AWS::Logs::LogGroup", "AWS::SQS::Queue"}
# (on delete, on replacement). RetainExceptOnCreate: kept, except by a failed first create,
# which holds nothing to keep and would leak them (a key is $1 a month).
KEPT = {
    "ProvidersRegistry": ("RetainExceptOnCreate", "Retain"),  # the providers' secrets, history
    "AppKey": ("RetainExceptOnCreate", "Retain"),  # encrypts the registry and the snapshots
    "Database": ("Snapshot", "Snapshot"),
}


def test_no_stateful_resource_goes_without_an_explicit_policy() -> None:
    """A delete or a replacement must never destroy user state by default: each resource of a
    stateful type says what becomes of it, and those holding user state are kept."""
    for name, resource in RESOURCES.items():
        if resource["Type"] not in STATEFUL_TYPES:
            continue
        assert "DeletionPolicy" in resource, name
        assert "UpdateReplacePolicy" in resource, name
    for name, resource in RESOURCES.items():
        if resource["Type"] in DELETED_TYPES:
            policies = (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy"))
            assert policies == ("Delete", "Delete"), name
    for name, (on_delete, on_replace) in KEPT.items():
        assert RESOURCES[name]["DeletionPolicy"] == on_delete, name
        assert RESOURCES[name]["UpdateReplacePolicy"] == on_replace, name
