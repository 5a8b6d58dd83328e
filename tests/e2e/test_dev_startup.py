"""`webhook-inbox dev` given what users give it: ports in use, folders that do not exist, another
dev's files, and providers configured as in production (public keys only).

A start-up mistake is one `error:` line and exit 2, found before anything starts (no PostgreSQL,
no data folder); a configuration that verifies but cannot sign still serves its providers.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from tests.e2e.dev_support import DevProcess, clean_env
from tests.integration.cli.conftest import CONSOLE_SCRIPT

NOTHING_STARTED_WITHIN_S = 30


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def dev_data_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("webhook-inbox-dev-pg-*")}


def run_dev(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "dev", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=cwd,
        timeout=NOTHING_STARTED_WITHIN_S,
        check=False,
    )


def standard_webhooks_config(tmp_path: Path, secret: dict[str, str]) -> Path:
    config = tmp_path / "providers.json"
    config.write_text(json.dumps({"providers": {"example": {
        "scheme": "standard-webhooks", "secrets": [secret]}}}))  # fmt: skip
    return config


SECRET = {"value": "whsec_" + base64.b64encode(b"dev-only-startup-test-secret").decode()}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("port in use", r"cannot listen on 127\.0\.0\.1:\d+: Address already in use"),
        ("address not on this machine", r"cannot listen on 192\.0\.2\.77:0: Cannot assign"),
        ("port out of range", r"argument --port: 99999 is not a port"),
        ("env file in a missing folder", r"--env-file .*: cannot write in .*no-such-folder"),
        ("env secret unset", r"provider example: \$WEBHOOK_INBOX_TEST_UNSET_SECRET is not set"),
        ("env file of a running dev", r"belongs to the webhook-inbox dev running as pid \d+"),
    ],
)
def test_a_start_up_mistake_is_one_error_line_before_anything_starts(
    case: str, expected: str, tmp_path: Path, listening_port: int
) -> None:
    config = standard_webhooks_config(tmp_path, SECRET)
    args = ["--providers", str(config), "--port", "0"]
    if case == "port in use":
        args += ["--port", str(listening_port)]
    elif case == "address not on this machine":
        args += ["--host", "192.0.2.77"]  # TEST-NET-1: never a local address
    elif case == "port out of range":
        args += ["--port", "99999"]
    elif case == "env file in a missing folder":
        args += ["--env-file", str(tmp_path / "no-such-folder" / "dev.env")]
    elif case == "env secret unset":
        config = standard_webhooks_config(tmp_path, {"env": "WEBHOOK_INBOX_TEST_UNSET_SECRET"})
    else:  # a live process (this test) named as the file's writer
        (tmp_path / ".webhook-inbox-dev.env").write_text(
            f"# written by webhook-inbox dev, pid {os.getpid()}\nDATABASE_URL=postgresql://x\n"
        )
    before = dev_data_folders()

    done = run_dev(*args, cwd=tmp_path)

    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    assert re.search(expected, errors[0]), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "throwaway PostgreSQL" not in done.stdout  # found before the database started
    assert "stopping" not in done.stdout  # nor anything else that would need stopping
    assert dev_data_folders() <= before
    if case == "env file of a running dev":  # the other dev's file is left as it was
        assert "DATABASE_URL=postgresql://x" in (tmp_path / ".webhook-inbox-dev.env").read_text()


def _public_key_config(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """Providers holding public keys only, as deployed; their private keys in files."""
    sendgrid = ec.generate_private_key(ec.SECP256R1())
    discord = ed25519.Ed25519PrivateKey.generate()
    v1a = ed25519.Ed25519PrivateKey.generate()
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    pem = (serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
           serialization.NoEncryption())  # fmt: skip
    providers = {
        "sg": {"scheme": "sendgrid", "secrets": [
            {"value": base64.b64encode(sendgrid.public_key().public_bytes(*der)).decode()}]},
        "bot": {"scheme": "discord", "options": {"endpoint": "interactions"}, "secrets": [
            {"value": discord.public_key().public_bytes(*raw).hex()}]},
        "example": {"scheme": "standard-webhooks", "secrets": [
            {"value": "whpk_" + base64.b64encode(v1a.public_key().public_bytes(*raw)).decode()}]},
    }  # fmt: skip
    config = tmp_path / "providers.json"
    config.write_text(json.dumps({"providers": providers}))
    keys = {}
    for name, key in (("sg", sendgrid), ("bot", discord)):
        keys[name] = tmp_path / f"{name}.pem"
        keys[name].write_bytes(key.private_bytes(*pem))
    keys["example"] = tmp_path / "example.key"
    seed = v1a.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())  # fmt: skip
    keys["example"].write_text("whsk_" + base64.b64encode(seed).decode())
    return config, keys


def test_providers_with_public_keys_only_are_served_and_say_how_to_sign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in a container or under su: the embedded PostgreSQL's platformdirs would warn.
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    config, keys = _public_key_config(tmp_path)
    dev = DevProcess("--providers", str(config), cwd=tmp_path)
    try:
        base = "http://127.0.0.1:" + dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1]
        dev.wait_for(r"ready; Ctrl-C stops everything")
        assert [line for line in dev.transcript if "Warning" in line] == []
        unsigned = dev.mentioned(r"no sample for '([a-z]+)'")
        assert sorted(unsigned) == ["bot", "example", "sg"], dev.transcript
        assert dev.mentioned(r"(--signing-key-file KEY)")  # what to run instead
        # The example handlers for `stripe` can never run with this configuration.
        unserved = r"handlers registered for providers not configured here: ([a-z, ]+) \("
        assert dev.mentioned(unserved) == ["stripe"]

        bodies = {
            "sg": [{"email": "a@example.com", "event": "delivered", "sg_event_id": "sg_1",
                    "sg_message_id": "m.1", "timestamp": 1}],
            "example": {"type": "customer.created", "data": {"id": "cus_pk_1"}},
        }  # fmt: skip
        for name, body in bodies.items():
            body_file = tmp_path / f"{name}.json"
            body_file.write_text(json.dumps(body))
            sent = subprocess.run(
                [str(CONSOLE_SCRIPT), "send", base, name, str(body_file), "--providers",
                 str(config), "--signing-key-file", str(keys[name])],
                capture_output=True, text=True, env=clean_env(), timeout=30, check=False,
            )  # fmt: skip
            assert sent.returncode == 0, sent.stdout + sent.stderr
            assert "-> 202" in sent.stdout
    finally:
        os.killpg(dev.proc.pid, signal.SIGINT)
        assert dev.proc.wait(timeout=20) == 0
