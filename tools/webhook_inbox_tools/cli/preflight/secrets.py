"""The secrets the functions read: an existing database's, and the providers'."""

from __future__ import annotations

import json

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest.providers import registry_for
from webhook_inbox_tools.cli.preflight.common import (
    FAIL,
    OK,
    WARN,
    Clients,
    Finding,
    Options,
    could_not_check,
)

# --- secrets -------------------------------------------------------------------------------


def _customer_key(aws: Clients, key_id: str | None) -> str | None:
    """The key's ARN when it is a customer managed key; None for the AWS managed one."""
    if not key_id:
        return None
    metadata = aws.kms.describe_key(KeyId=key_id)["KeyMetadata"]
    return None if metadata.get("KeyManager") == "AWS" else str(metadata["Arn"])


def check_database_secret(aws: Clients, opts: Options) -> list[Finding]:
    check = "database secret"
    arn = opts.database_secret_arn
    if not arn:
        proxy = "behind RDS Proxy" if opts.create_database_proxy else "without RDS Proxy"
        return [Finding(OK, check, f"none given: the stack creates RDS PostgreSQL {proxy}")]
    try:
        described = aws.secretsmanager.describe_secret(SecretId=arn)
        key = _customer_key(aws, described.get("KmsKeyId"))
        raw = aws.secretsmanager.get_secret_value(SecretId=arn).get("SecretString", "")
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [
            could_not_check(
                check,
                exc,
                "secretsmanager:DescribeSecret, GetSecretValue, kms:DescribeKey",
                aws.region,
            )
        ]
    findings = []
    try:
        secret = json.loads(raw)
    except ValueError:
        secret = None
    if not isinstance(secret, dict):
        return [Finding(FAIL, check, "the secret is not a JSON object", "store the RDS JSON shape")]
    missing = [k for k in ("username", "password") if not secret.get(k)]
    if not opts.database_host and not secret.get("host"):
        missing.append("host")
    if missing:
        managed = str(described.get("Name", "")).startswith("rds!")
        fix = (
            "set DatabaseHost (and DatabasePort, DatabaseName) to where the database listens"
            if missing == ["host"]
            else "store username, password, host, port and dbname in the secret"
        )
        findings.append(
            Finding(
                FAIL,
                check,
                f"lacks {', '.join(missing)}"
                + (" (an RDS-managed secret holds only username and password)" if managed else ""),
                fix,
            )
        )
    # Key ARNs, not secret material: a plain comparison is right here.
    allowed_key = opts.database_secret_kms_key_arn
    if key and key != allowed_key:
        findings.append(
            Finding(
                FAIL,
                check,
                f"encrypted with the customer managed key {key}: the functions get KMS access "
                "denied",
                f"set DatabaseSecretKmsKeyArn={key}",
            )
        )
    if not findings:
        findings.append(
            Finding(OK, check, "usable: JSON with username, password and a host; key allowed")
        )
    return findings


def _app_key_arn(aws: Clients, opts: Options) -> str | None:
    try:
        stack = aws.cloudformation.describe_stacks(StackName=opts.stack_name)["Stacks"][0]
    except Exception:  # noqa: BLE001 - no stack yet: no app key yet
        return None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return outputs.get("AppKeyArn")


def check_provider_secrets(aws: Clients, opts: Options) -> list[Finding]:
    check = "provider secrets"
    prefix = opts.provider_secrets_prefix
    try:
        listed = aws.secretsmanager.list_secrets(Filters=[{"Key": "name", "Values": [prefix]}])
        secrets = [s for s in listed["SecretList"] if str(s["Name"]).startswith(prefix)]
        app_key = _app_key_arn(aws, opts)
        unreadable = []
        for secret in secrets:
            key = _customer_key(aws, secret.get("KmsKeyId"))
            if key and key != app_key:
                unreadable.append(f"{secret['Name']} ({key})")
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [
            could_not_check(check, exc, "secretsmanager:ListSecrets, kms:DescribeKey", aws.region)
        ]
    findings = []
    if unreadable:
        findings.append(
            Finding(
                FAIL,
                check,
                f"{', '.join(unreadable)}: encrypted with a key ingest may not use",
                "re-encrypt with the stack's key (output AppKeyArn) or aws/secretsmanager: "
                "aws secretsmanager update-secret --secret-id NAME --kms-key-id KEY",
            )
        )
    names = {str(s["ARN"]): s["Name"] for s in secrets}
    for arn in _configured_secret_arns(opts.providers_config):
        if arn not in names:
            findings.append(
                Finding(
                    FAIL,
                    check,
                    f"ProvidersConfig names {arn}, which is not a secret under {prefix!r}",
                    f"create it under {prefix} (ingest may read only those) or fix the ARN",
                )
            )
    if not findings and secrets:
        findings.append(
            Finding(OK, check, f"{len(secrets)} under {prefix!r}, all readable by ingest")
        )
    elif not findings:
        findings.append(
            Finding(
                WARN,
                check,
                f"none under {prefix!r} yet",
                "add them after the deploy (docs/deploy.md, 'Add a provider')",
            )
        )
    return findings


def check_providers_config(opts: Options) -> list[Finding]:
    """ProvidersConfig parsed and validated by the runtime's own code, as ingest does when it
    starts: a configuration it refuses makes every delivery a 500."""
    check = "ProvidersConfig"
    try:
        registry = registry_for(opts.providers_config, "")
    except ConfigurationError as exc:
        return [
            Finding(
                FAIL,
                check,
                f"ingest would refuse it ({exc}) and answer every delivery with 500",
                "fix it as docs/providers.md#configuration describes",
            )
        ]
    names = ", ".join(sorted(registry.providers)) or "none yet"
    return [Finding(OK, check, f"valid; providers: {names}")]


def _configured_secret_arns(providers_config: str) -> list[str]:
    try:
        registry = registry_for(providers_config, "")
    except ConfigurationError:
        return []  # check_providers_config reports it
    return [
        ref.ref
        for provider in registry.providers.values()
        for ref in provider.secret_refs
        if ref.kind == "secret_arn"
    ]
