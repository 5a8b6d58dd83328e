"""`webhook-inbox sign` for the public-key senders, checked by their official verifiers: with the
sample providers' private keys, and with --signing-key-file for a provider that holds only the
public key (what a production configuration holds)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from discord_interactions import verify_key
from sendgrid.helpers.eventwebhook import EventWebhook

from tests.integration.cli.conftest import run_console_script
from tests.support import ROOT
from webhook_inbox.ingest.schemes import Discord, SendGrid
from webhook_inbox_tools.cli import main

SAMPLE = ROOT / "events" / "providers.local.json"
KEYS = {
    name: spec["secrets"][0]["value"]
    for name, spec in json.loads(SAMPLE.read_text())["providers"].items()
}
DISCORD_PUBLIC = Discord.public_key(KEYS["discord"])
SENDGRID_PUBLIC = SendGrid.public_key(KEYS["sendgrid"])


def _sign(capsys: pytest.CaptureFixture[str], *argv: str, providers: Path = SAMPLE) -> Any:
    capsys.readouterr()
    assert main(["sign", *argv, "--format", "json", "--providers", str(providers)]) == 0
    return json.loads(capsys.readouterr().out)["headers"]


def test_discord_signature_verifies_with_discord_interactions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "interaction.json"
    body.write_bytes(b'{"type":2,"id":"1","data":{"name":"hello"}}')
    headers = _sign(capsys, "discord", str(body))
    assert verify_key(
        body.read_bytes(),
        headers["X-Signature-Ed25519"],
        headers["X-Signature-Timestamp"],
        DISCORD_PUBLIC,
    )


def test_sendgrid_signature_verifies_with_the_sendgrid_library(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "events.json"
    body.write_bytes(b'[{"event":"delivered","sg_event_id":"e1"}]\r\n')
    headers = _sign(capsys, "sendgrid", str(body))
    assert EventWebhook(SENDGRID_PUBLIC).verify_signature(
        body.read_bytes().decode(),  # read_text() would turn the signed CR LF into LF
        headers["X-Twilio-Email-Event-Webhook-Signature"],
        headers["X-Twilio-Email-Event-Webhook-Timestamp"],
    )


def test_standard_webhooks_v1a_signature_verifies_with_pynacl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tmp_path / "event.json"
    body.write_bytes(b'{"type":"invoice.paid"}')
    headers = _sign(capsys, "webhooks-v1a", str(body), "--event-id", "msg_1", "--timestamp", "7")
    version, _, signature = headers["webhook-signature"].partition(",")
    assert version == "v1a"
    seed = base64.b64decode(KEYS["webhooks-v1a"].removeprefix("whsk_"))
    verifier = nacl.signing.SigningKey(seed).verify_key
    verifier.verify(b"msg_1.7." + body.read_bytes(), base64.b64decode(signature))


def test_a_public_key_provider_signs_only_with_a_signing_key_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "providers.json"
    config.write_text(json.dumps({"providers": {"discord": {
        "scheme": "discord", "options": {"endpoint": "interactions"},
        "secrets": [{"value": DISCORD_PUBLIC}]}}}))  # fmt: skip
    body = tmp_path / "interaction.json"
    body.write_bytes(b'{"type":2,"id":"2"}')

    refused = run_console_script("sign", "discord", str(body), "--providers", str(config))
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: discord: the application public key only verifies")
    assert "Traceback" not in refused.stderr

    key_file = tmp_path / "discord.pem"
    key_file.write_text(KEYS["discord"] + "\n\n")
    headers = _sign(
        capsys, "discord", str(body), "--signing-key-file", str(key_file), providers=config
    )
    assert verify_key(
        body.read_bytes(),
        headers["X-Signature-Ed25519"],
        headers["X-Signature-Timestamp"],
        DISCORD_PUBLIC,
    )

    key_file.write_text("not a key")
    bad = run_console_script(
        "sign",
        "discord",
        str(body),
        "--providers",
        str(config),
        "--signing-key-file",
        str(key_file),
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: discord: a key is the application public key")
