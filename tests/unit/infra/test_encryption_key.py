"""EncryptionKey: the stack's own KMS key (customer-managed, the default) or each service's own
encryption (aws-managed, the aurora-paused set's). Every resource that stores data is encrypted
either way; with aws-managed nothing may name the key, which does not exist then."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra_support import Placeholders, Resolver, load_template, parameter_values

RESOURCES = load_template()["Resources"]
# The properties through which a resource names the key that encrypts it.
KEY_PROPERTIES = {"KmsKeyId", "KmsMasterKeyId", "KMSMasterKeyID", "KmsKeyArn"}
# Every resource type that stores data, and how it says it is encrypted whatever the key.
STORES = {
    "AWS::RDS::DBInstance",
    "AWS::RDS::DBCluster",
    "AWS::SecretsManager::Secret",
    "AWS::SQS::Queue",
    "AWS::SNS::Topic",
    "AWS::Logs::LogGroup",
    "AWS::S3::Bucket",
}
# Deployments that between them create every store: the defaults (RDS Proxy's connection
# secret), Aurora, an SNS outbox, the Function URL (no access log group).
VARIANTS = [
    {"PrivateRouteTableIds": "rtb-1"},
    {
        "DatabaseEngine": "aurora-serverless-v2",
        "AuroraMinCapacity": "0",
        "CreateDatabaseProxy": "false",
    },
    {"OutboxDestination": "sns"},
]


def deployed(**params: str) -> dict[str, dict[str, Any]]:
    """The resources a deploy with ``params`` creates, each ``Fn::If`` replaced by its branch
    (``AWS::NoValue`` by None); other intrinsics stay as written."""
    resolver = Resolver(parameter_values(**params), Placeholders())

    def choose(value: Any) -> Any:
        if isinstance(value, list):
            return [choose(v) for v in value]
        if not isinstance(value, dict):
            return value
        if set(value) == {"Fn::If"}:
            name, when_true, when_false = value["Fn::If"]
            return choose(when_true if resolver.condition(name) else when_false)
        if value == {"Ref": "AWS::NoValue"}:
            return None
        return {k: choose(v) for k, v in value.items()}

    return {
        name: choose(resource)
        for name, resource in RESOURCES.items()
        if "Condition" not in resource or resolver.condition(resource["Condition"])
    }


STACK_KEY = [{"Fn::GetAtt": ["AppKey", "Arn"]}, {"Ref": "AppKey"}]


def named_keys(value: Any) -> list[Any]:
    """Every value of a key property anywhere inside ``value``."""
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k in KEY_PROPERTIES and v is not None]
        return found + [x for v in value.values() for x in named_keys(v)]
    if isinstance(value, list):
        return [x for v in value for x in named_keys(v)]
    return []


@pytest.mark.parametrize("variant", VARIANTS, ids=["default", "aurora", "sns"])
def test_by_default_every_store_is_encrypted_with_the_stacks_key(variant: dict[str, str]) -> None:
    created = deployed(**variant)
    assert "AppKey" in created
    stores = {n: r for n, r in created.items() if _stores_data(r)}
    assert stores
    for name, resource in stores.items():
        keys = named_keys(resource["Properties"])
        assert keys, name
        assert all(key in STACK_KEY for key in keys), (name, keys)


@pytest.mark.parametrize("variant", VARIANTS, ids=["default", "aurora", "sns"])
def test_aws_managed_names_no_key_and_still_encrypts_every_store(variant: dict[str, str]) -> None:
    created = deployed(EncryptionKey="aws-managed", **variant)
    assert "AppKey" not in created
    assert "AppKeyAlias" not in created
    assert "AppKey" not in json.dumps(created)  # no reference to a key that does not exist
    for name, resource in created.items():
        props = resource.get("Properties", {})
        match resource["Type"]:
            case "AWS::SQS::Queue":
                assert props["SqsManagedSseEnabled"] is True, name
            case "AWS::RDS::DBInstance" | "AWS::RDS::DBCluster" if _stores_data(resource):
                assert props["StorageEncrypted"] is True, name  # aws/rds
            case "AWS::S3::Bucket":
                (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
                by_default = rule["ServerSideEncryptionByDefault"]
                assert by_default["SSEAlgorithm"] == "aws:kms", name  # aws/s3
                assert by_default.get("KMSMasterKeyID") is None, name
            case "AWS::SNS::Topic" if name != "AlarmTopic":
                assert props["KmsMasterKeyId"] == "alias/aws/sns", name
            case "AWS::SNS::Topic":
                # CloudWatch alarms and RDS events cannot publish under aws/sns.
                assert props.get("KmsMasterKeyId") is None
            case "AWS::SecretsManager::Secret" | "AWS::Logs::LogGroup":
                assert props.get("KmsKeyId") is None, name  # the service's own key
            case _:
                pass


def _stores_data(resource: dict[str, Any]) -> bool:
    """An Aurora cluster's instances store nothing of their own: the cluster's volume does."""
    props = resource.get("Properties", {})
    return resource["Type"] in STORES and "DBClusterIdentifier" not in props


def test_the_aurora_paused_set_uses_the_services_keys() -> None:
    """Its $1 a month is a fifth of the set's goal; the others keep the stack's key."""
    import tomllib
    from pathlib import Path

    config = tomllib.loads(Path("samconfig.toml").read_text())
    overrides = {
        env: dict(
            item.split("=", 1)
            for item in section["deploy"]["parameters"].get("parameter_overrides", [])
        )
        for env, section in config.items()
        if isinstance(section, dict) and "deploy" in section
    }
    assert overrides["aurora-paused"]["EncryptionKey"] == "aws-managed"
    assert all(
        o.get("EncryptionKey", "customer-managed") == "customer-managed"
        for env, o in overrides.items()
        if env != "aurora-paused"
    )
