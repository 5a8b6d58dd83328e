"""`webhook-inbox providers …` against moto: a CloudFormation stack naming its registry secret,
the real Secrets Manager calls, and the CLI run in-process as a user would."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.integration.cli.conftest import Result, seed_event
from webhook_inbox_tools.cli import main

REGION = "us-east-1"
STACK = "inbox-test"
SECRET = "whsec_a-brand-new-secret-value-0123456789"
NEWER = "whsec_the-rotated-secret-value-9876543210"
# The stack as `sam deploy` left it before the registry was written: ProvidersConfig serves.
DEPLOYED_CONFIG = {
    "providers": {
        "stripe": {
            "scheme": "stripe",
            "secrets": [
                {"secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:p/stripe"}
            ],
        }
    }
}
# A stand-in for the template: what the commands read of it (its output and parameter).
STACK_TEMPLATE = {
    "Parameters": {"ProvidersConfig": {"Type": "String"}, "RegistryArn": {"Type": "String"}},
    "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
    "Outputs": {"ProvidersRegistryArn": {"Value": {"Ref": "RegistryArn"}}},
}


@dataclass
class Stack:
    registry_arn: str
    secrets: Any

    def document(self) -> dict[str, Any]:
        text = self.secrets.get_secret_value(SecretId=self.registry_arn)["SecretString"]
        document: dict[str, Any] = json.loads(text)
        return document

    def version(self) -> str:
        return str(self.secrets.get_secret_value(SecretId=self.registry_arn)["VersionId"])


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[Stack]:
    monkeypatch.chdir(tmp_path)  # no dev env file here
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with mock_aws():
        kms = boto3.client("kms", region_name=REGION)
        key = kms.create_key()["KeyMetadata"]["Arn"]
        secrets = boto3.client("secretsmanager", region_name=REGION)
        arn = secrets.create_secret(
            Name=f"{STACK}/providers-registry",
            KmsKeyId=key,
            SecretString=json.dumps({"format": 1, "providers": None, "history": []}),
        )["ARN"]
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName=STACK,
            TemplateBody=json.dumps(STACK_TEMPLATE),
            Parameters=[
                {"ParameterKey": "ProvidersConfig", "ParameterValue": json.dumps(DEPLOYED_CONFIG)},
                {"ParameterKey": "RegistryArn", "ParameterValue": arn},
            ],
        )
        yield Stack(arn, secrets)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    def run(*argv: str, stdin: str = "") -> Result:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(["providers", *argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def on_stack(*argv: str) -> list[str]:
    return [*argv, "--stack", STACK, "--region", REGION]


def add_acme(cli: Any, secret: str = SECRET) -> Result:
    return cli(
        *on_stack("add", "acme", "--scheme", "hmac-sha256", "--secret-stdin"),
        "--option",
        "signature_header=X-Acme-Signature",
        stdin=secret + "\n",
    )


def test_add_imports_providers_config_then_adds_and_never_prints_the_secret(
    stack: Stack, cli: Any
) -> None:
    result = add_acme(cli)
    assert result.code == 0, result.err
    assert "imported ProvidersConfig first" in result.out
    assert "live within 60 seconds" in result.out
    assert "someone else changed" not in result.err
    document = stack.document()
    assert set(document["providers"]) == {"stripe", "acme"}
    assert document["providers"]["stripe"] == DEPLOYED_CONFIG["providers"]["stripe"]
    (entry,) = document["providers"]["acme"]["secrets"]
    assert entry["value"] == SECRET  # stdin's trailing newline dropped
    assert document["providers"]["acme"]["options"] == {"signature_header": "X-Acme-Signature"}
    assert [h["action"] for h in document["history"]] == ["import", "add"]
    assert all(h["by"].startswith("arn:aws:") for h in document["history"])
    assert SECRET not in json.dumps(document["history"])
    shown = cli(*on_stack("show", "acme"))
    listed = cli(*on_stack("list", "--json"))
    history = cli(*on_stack("history"))
    for out in (result, shown, listed, history):
        assert SECRET not in out.out + out.err


def test_an_existing_name_is_refused_with_a_hint_to_rotate(stack: Stack, cli: Any) -> None:
    assert add_acme(cli).code == 0
    version = stack.version()
    again = add_acme(cli, "whsec_another")
    assert again.code == 1
    assert "providers rotate acme" in again.err
    assert stack.version() == version


def test_an_invalid_configuration_is_refused_and_nothing_is_written(stack: Stack, cli: Any) -> None:
    version = stack.version()
    result = cli(*on_stack("add", "bad", "--scheme", "no-such-scheme", "--secret-stdin"), stdin="x")
    assert result.code == 2
    assert "refused, nothing was written" in result.err
    assert "no-such-scheme" in result.err
    assert stack.version() == version
    assert stack.document()["providers"] is None  # not even the import happened


def test_an_unparseable_public_url_is_refused_and_nothing_is_written(
    stack: Stack, cli: Any
) -> None:
    version = stack.version()
    result = cli(
        *on_stack("add", "acme", "--scheme", "hmac-sha256", "--secret-stdin"),
        "--option",
        "signature_header=X-Acme-Signature",
        "--public-url",
        "http://[::1",
        stdin=SECRET,
    )
    assert result.code == 2
    assert "refused, nothing was written" in result.err
    assert "public_url" in result.err
    assert "Traceback" not in result.err
    assert stack.version() == version


def _expire_every_secret_of(stack: Stack, name: str) -> None:
    """The registry as a rotation left it once the overlap ended with no new secret (or a
    secret added with a mistyped expiry): every secret of ``name`` has expired."""
    document = stack.document()
    for secret in document["providers"][name]["secrets"]:
        secret["expires_at"] = "2020-01-01T00:00:00Z"
    stack.secrets.put_secret_value(SecretId=stack.registry_arn, SecretString=json.dumps(document))


def test_a_provider_with_no_live_secret_blocks_no_write_of_another(stack: Stack, cli: Any) -> None:
    assert add_acme(cli).code == 0
    _expire_every_secret_of(stack, "acme")
    # An add, a rotation and a removal of other providers all go through.
    added = cli(*on_stack("add", "beta", "--scheme", "stripe", "--secret-stdin"), stdin=SECRET)
    assert added.code == 0, added.err
    rotated = cli(*on_stack("rotate", "beta", "--secret-stdin", "--keep-old-for", "0"), stdin=NEWER)
    assert rotated.code == 0, rotated.err
    assert cli(*on_stack("remove", "stripe", "--yes")).code == 0
    # The expired provider is still there, visible, and can itself be rotated or removed.
    assert set(stack.document()["providers"]) == {"acme", "beta"}
    fixed = cli(*on_stack("rotate", "acme", "--secret-stdin", "--keep-old-for", "0"), stdin=NEWER)
    assert fixed.code == 0, fixed.err
    assert [s["value"] for s in stack.document()["providers"]["acme"]["secrets"]] == [NEWER]


def test_list_flags_a_provider_with_no_live_secret_and_says_what_to_do(
    stack: Stack, cli: Any
) -> None:
    assert add_acme(cli).code == 0
    _expire_every_secret_of(stack, "acme")
    listed = cli(*on_stack("list", "--json"))
    assert listed.code == 0, listed.err
    rows = {row["name"]: row for row in listed.json()["providers"]}
    assert (rows["acme"]["live_secret"], rows["stripe"]["live_secret"]) == (False, True)
    (note,) = [n for n in listed.json()["notes"] if "no live secret" in n]
    assert "providers rotate acme" in note
    table = cli(*on_stack("list"))
    assert "none live" in table.out
    assert "providers rotate acme" in table.err


def test_show_masks_secrets_with_a_fingerprint(stack: Stack, cli: Any) -> None:
    add_acme(cli)
    shown = cli(*on_stack("show", "acme", "--json")).json()
    (secret,) = shown["secrets"]
    assert secret["kind"] == "value"
    assert secret["fingerprint"].startswith("sha256:")
    assert len(secret["fingerprint"]) == 15
    assert "value" not in secret
    assert secret["added_at"].endswith("Z")
    imported = cli(*on_stack("show", "stripe", "--json")).json()
    assert imported["secrets"] == [
        {"kind": "secret_arn", **DEPLOYED_CONFIG["providers"]["stripe"]["secrets"][0]}
    ]


def test_rotate_puts_the_new_secret_first_and_expires_the_old_one(stack: Stack, cli: Any) -> None:
    add_acme(cli)
    result = cli(*on_stack("rotate", "acme", "--secret-stdin", "--keep-old-for", "2h"), stdin=NEWER)
    assert result.code == 0, result.err
    new, old = stack.document()["providers"]["acme"]["secrets"]
    assert new["value"] == NEWER
    assert "expires_at" not in new
    assert old["value"] == SECRET
    assert old["expires_at"] > new["added_at"]
    entry = stack.document()["history"][-1]
    assert entry["action"] == "rotate"
    assert entry["change"]["old_expire_at"] == old["expires_at"]
    assert NEWER not in result.out + result.err + json.dumps(stack.document()["history"])


def test_rotate_with_no_overlap_drops_the_old_secret(stack: Stack, cli: Any) -> None:
    add_acme(cli)
    cli(*on_stack("rotate", "acme", "--secret-stdin", "--keep-old-for", "0"), stdin=NEWER)
    assert [s["value"] for s in stack.document()["providers"]["acme"]["secrets"]] == [NEWER]


def test_remove_asks_first_and_keeps_the_rest(stack: Stack, cli: Any) -> None:
    add_acme(cli)
    version = stack.version()
    declined = cli(*on_stack("remove", "acme"), stdin="n\n")
    assert declined.code == 1
    assert stack.version() == version
    assert cli(*on_stack("remove", "acme", "--yes")).code == 0
    assert set(stack.document()["providers"]) == {"stripe"}
    missing = cli(*on_stack("remove", "acme", "--yes"))
    assert missing.code == 1
    assert "no provider 'acme'" in missing.err


def test_history_lists_who_did_what(stack: Stack, cli: Any) -> None:
    add_acme(cli)
    cli(*on_stack("remove", "acme", "--yes"))
    everything = cli(*on_stack("history", "--json")).json()
    assert [(e["action"], e["provider"]) for e in everything] == [
        ("import", "stripe"),
        ("add", "acme"),
        ("remove", "acme"),
    ]
    entries = cli(*on_stack("history", "acme", "--json")).json()
    assert [e["action"] for e in entries] == ["add", "remove"]
    caller = boto3.client("sts", region_name=REGION).get_caller_identity()["Arn"]
    assert {e["by"] for e in entries} == {caller}
    assert entries[-1]["change"] == {"scheme": "hmac-sha256"}


def test_import_takes_over_providers_config_once(stack: Stack, cli: Any) -> None:
    listed = cli(*on_stack("list", "--json")).json()
    assert listed["source"].startswith("ProvidersConfig")
    result = cli(*on_stack("import"))
    assert result.code == 0, result.err
    assert stack.document()["providers"] == DEPLOYED_CONFIG["providers"]
    assert cli(*on_stack("list", "--json")).json()["source"] == "the providers registry"
    again = cli(*on_stack("import"))
    assert again.code == 1
    assert "already managed" in again.err


def test_list_shows_every_provider_with_zero_counts_before_any_traffic(
    stack: Stack, cli: Any
) -> None:
    add_acme(cli)
    listed = cli(*on_stack("list"))
    assert listed.code == 0, listed.err
    assert "acme" in listed.out
    assert "stripe" in listed.out
    as_json = cli(*on_stack("list", "--json")).json()
    acme = next(p for p in as_json["providers"] if p["name"] == "acme")
    assert (acme["accepted_24h"], acme["duplicates_24h"], acme["rejected_24h"]) == (0, 0, 0)
    assert as_json["counts_from"] == "metrics"
    assert as_json["notes"] == []


def test_list_counts_from_the_stacks_metrics(stack: Stack, cli: Any) -> None:
    """What the template's metric filters publish: per provider and service (the stack)."""
    add_acme(cli)
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    dimensions = [{"Name": "provider", "Value": "acme"}, {"Name": "service", "Value": STACK}]
    for metric, value in (("Accepted", 3.0), ("Duplicate", 1.0), ("RejectedByProvider", 2.0)):
        cloudwatch.put_metric_data(
            Namespace="WebhookInbox",
            MetricData=[{"MetricName": metric, "Dimensions": dimensions, "Value": value}],
        )
    listed = cli(*on_stack("list", "--json")).json()
    acme = next(p for p in listed["providers"] if p["name"] == "acme")
    assert (acme["accepted_24h"], acme["duplicates_24h"], acme["rejected_24h"]) == (3, 1, 2)
    assert acme["last_delivery_at"] is not None
    stripe = next(p for p in listed["providers"] if p["name"] == "stripe")
    assert (stripe["accepted_24h"], stripe["last_delivery_at"]) == (0, None)


def test_a_database_out_of_reach_falls_back_to_the_metrics(stack: Stack, cli: Any) -> None:
    add_acme(cli)
    unreachable = "postgresql://inbox@127.0.0.1:1/inbox?connect_timeout=2"
    listed = cli(*on_stack("list", "--json", "--database-url", unreachable)).json()
    assert listed["counts_from"] == "metrics"
    assert any(n.startswith("no traffic counts: the database") for n in listed["notes"])


def test_without_a_stack_or_a_dev_the_error_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, cli: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    result = cli("list")
    assert result.code == 2
    assert "--stack" in result.err
    assert "webhook-inbox dev" in result.err


def test_a_stack_without_the_registry_output_is_told_to_deploy(stack: Stack, cli: Any) -> None:
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="old-stack",
        TemplateBody=json.dumps({"Resources": STACK_TEMPLATE["Resources"]}),
    )
    result = cli("list", "--stack", "old-stack", "--region", REGION)
    assert result.code == 2
    assert "ProvidersRegistryArn" in result.err


def test_a_public_key_comes_from_its_file(stack: Stack, cli: Any, tmp_path: Path) -> None:
    key = tmp_path / "discord.pub"
    key.write_text("a" * 64 + "\n")
    result = cli(
        *on_stack("add", "chat", "--scheme", "discord", "--public-key-file", str(key)),
        "--option",
        "endpoint=webhook-events",
    )
    assert result.code == 0, result.err
    (entry,) = stack.document()["providers"]["chat"]["secrets"]
    assert entry["value"] == "a" * 64


def test_a_write_that_races_another_says_so(
    stack: Stack, cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook_inbox_tools.cli.providers import store

    add_acme(cli)
    real_caller_arn = store.caller_arn

    def someone_else_writes_first(target: Any) -> str:
        # Between this command's read and its write, another operator's write lands.
        stack.secrets.put_secret_value(
            SecretId=stack.registry_arn, SecretString=json.dumps(stack.document())
        )
        return real_caller_arn(target)

    monkeypatch.setattr(store, "caller_arn", someone_else_writes_first)
    result = cli(*on_stack("remove", "acme", "--yes"))
    assert result.code == 0
    assert "someone else changed the registry" in result.err
    assert "providers history" in result.err


# --- IAM: the documented needs are exactly the calls each command makes -------------------


def documented_iam_needs() -> dict[str, set[str]]:
    """docs/deploy.md's table: command → the actions it needs (the kms: ones included)."""
    deploy = (Path(__file__).parents[3] / "docs" / "deploy.md").read_text()
    table = deploy.split("| command (webhook-inbox providers …) | IAM actions |", 1)[1]
    needs: dict[str, set[str]] = {}
    for line in table.split("\n\n", 1)[0].splitlines()[2:]:
        commands, actions = line.strip("|").split(" | ")
        for command in commands.split(", "):
            needs[command.strip()] = set(re.findall(r"`([a-z0-9-]+:[A-Za-z]+)`", actions))
    return needs


@pytest.fixture
def aws_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every AWS operation made from here on, as its IAM action (service:Operation)."""
    from botocore.client import BaseClient

    calls: list[str] = []
    original = BaseClient._make_api_call

    def record(client: Any, operation: str, params: Any) -> Any:
        calls.append(f"{client.meta.service_model.service_name}:{operation}")
        return original(client, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", record)
    return calls


def test_each_commands_documented_iam_needs_are_the_calls_it_makes(
    stack: Stack, cli: Any, aws_calls: list[str]
) -> None:
    runs = {
        "import": lambda: cli(*on_stack("import")),
        "add": lambda: add_acme(cli),
        "list": lambda: cli(*on_stack("list")),
        "show": lambda: cli(*on_stack("show", "acme")),
        "history": lambda: cli(*on_stack("history")),
        "rotate": lambda: cli(*on_stack("rotate", "acme", "--secret-stdin"), stdin=NEWER),
        "remove": lambda: cli(*on_stack("remove", "acme", "--yes")),
    }
    needs = documented_iam_needs()
    assert sorted(needs) == sorted(runs)
    # Secrets Manager uses the stack's key on the caller's behalf: never a call of their own.
    via_secrets_manager = {"kms:Decrypt", "kms:GenerateDataKey"}
    for command, run in runs.items():
        aws_calls.clear()
        assert run().code == 0, command
        assert set(aws_calls) == needs[command] - via_secrets_manager, command
        assert "kms:Decrypt" in needs[command]
        writes = "secretsmanager:PutSecretValue" in aws_calls
        assert ("kms:GenerateDataKey" in needs[command]) == writes, command


def test_with_the_database_the_counts_are_its_own_and_the_rejections_the_metrics(
    stack: Stack, cli: Any, database_url: str
) -> None:
    add_acme(cli)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM webhook_events WHERE provider = 'acme'")
        seed_event(conn, "evt_db_1", provider="acme")
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    dimensions = [{"Name": "provider", "Value": "acme"}, {"Name": "service", "Value": STACK}]
    for metric, value in (("Accepted", 9.0), ("RejectedByProvider", 4.0)):
        cloudwatch.put_metric_data(
            Namespace="WebhookInbox",
            MetricData=[{"MetricName": metric, "Dimensions": dimensions, "Value": value}],
        )
    listed = cli(*on_stack("list", "--json", "--database-url", database_url)).json()
    assert listed["counts_from"] == "database"
    acme = next(p for p in listed["providers"] if p["name"] == "acme")
    assert (acme["accepted_24h"], acme["rejected_24h"]) == (1, 4)


SNS_TOPIC_OPTION = 'topic_arns=["arn:aws:sns:us-east-1:123456789012:orders"]'
SNS_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem"


def test_a_certificate_is_pinned_with_its_url_and_a_fetching_one_needs_no_secret(
    stack: Stack, cli: Any, tmp_path: Path
) -> None:
    from tests.cert_authority import leaf

    pem = tmp_path / "sns.pem"
    pem.write_text(leaf().certificate_pem)
    result = cli(
        *on_stack("add", "sns", "--scheme", "sns", "--pin-certificate", str(pem)),
        "--certificate-url",
        SNS_URL,
        "--option",
        SNS_TOPIC_OPTION,
        "--option",
        "certificates=pinned",
    )
    assert result.code == 0, result.err
    (entry,) = stack.document()["providers"]["sns"]["secrets"]
    assert entry["value"].startswith(f"url: {SNS_URL}\n-----BEGIN CERTIFICATE-----")
    # Without its URL, or a file holding a private key: refused, nothing written.
    assert cli(*on_stack("rotate", "sns", "--pin-certificate", str(pem))).code != 0
    pem.write_text(leaf().pin(SNS_URL))
    refused = cli(
        *on_stack("rotate", "sns", "--pin-certificate", str(pem)), "--certificate-url", SNS_URL
    )
    assert refused.code != 0
    assert "private key" in refused.err
    # A provider that downloads its certificates: no secret, and not "none live".
    fetching = cli(
        *on_stack("add", "sns-fetch", "--scheme", "sns", "--no-secret"),
        "--option",
        SNS_TOPIC_OPTION,
    )
    assert fetching.code == 0, fetching.err
    assert stack.document()["providers"]["sns-fetch"]["secrets"] == []
    listed = cli(*on_stack("list", "--json"))
    assert listed.code == 0, listed.err
    rows = {row["name"]: row for row in json.loads(listed.out)["providers"]}
    assert rows["sns-fetch"]["live_secret"] is True
    # A scheme that needs a secret cannot go without one.
    assert cli(*on_stack("add", "bare", "--scheme", "stripe", "--no-secret")).code != 0


def test_token_senders_pin_a_published_jwk_or_go_without_a_secret(
    stack: Stack, cli: Any, tmp_path: Path
) -> None:
    from tests.token_keys import private_jwk_text, public_jwk

    key = tmp_path / "plaid.jwk.json"
    key.write_text(json.dumps(public_jwk("plaid-cli-1", "ec")))
    assert (
        cli(*on_stack("add", "plaid", "--scheme", "plaid", "--public-key-file", str(key))).code == 0
    )
    (entry,) = stack.document()["providers"]["plaid"]["secrets"]
    assert json.loads(entry["value"])["kid"] == "plaid-cli-1"
    # A private JWK (a development key) is never pinned in a stack's registry.
    key.write_text(private_jwk_text("plaid-cli-2", "ec"))
    refused = cli(*on_stack("rotate", "plaid", "--public-key-file", str(key)))
    assert refused.code != 0
    assert "private" in refused.err
    # An RSA key is not Plaid's: refused by the runtime's own validation, nothing written.
    key.write_text(json.dumps(public_jwk("rsa-cli", "rsa")))
    assert cli(*on_stack("rotate", "plaid", "--public-key-file", str(key))).code != 0
    assert len(stack.document()["providers"]["plaid"]["secrets"]) == 1
    # Google downloads its key set and Apple's root is embedded: no secret needed.
    google = cli(
        *on_stack("add", "pubsub", "--scheme", "google-pubsub", "--no-secret"),
        "--option", "audience=https://hooks.example.com/webhooks/pubsub",
        "--option", "service_account_email=push@project-1.iam.gserviceaccount.com",
    )  # fmt: skip
    assert google.code == 0, google.err
    apple = cli(
        *on_stack("add", "apple", "--scheme", "app-store", "--no-secret"),
        "--option", "bundle_id=com.example.app",
    )  # fmt: skip
    assert apple.code == 0, apple.err
    # Plaid's keys are always pinned: it cannot go without one.
    assert cli(*on_stack("add", "bare-plaid", "--scheme", "plaid", "--no-secret")).code != 0
