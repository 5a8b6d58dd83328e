"""`webhook-inbox providers …` without --stack: the running `webhook-inbox dev` named by its env
file, its moto (a real moto server over a socket) and its database for `list`'s counts."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest

from tests.faults.fixtures import MotoEndpoint
from tests.integration.cli.conftest import seed_event
from tests.support import ROOT
from webhook_inbox.ingest import providers
from webhook_inbox.ingest.provider_registry import INITIAL_TEXT
from webhook_inbox_tools.cli import main, signing
from webhook_inbox_tools.dev.env_file import DEFAULT_ENV_FILE, write_env_file

REGION = "us-east-1"
SAMPLE_PROVIDERS = ROOT / "events" / "providers.local.json"
SECRET = "a-dev-secret-typed-into-the-terminal"


@pytest.fixture
def dev_owner() -> Iterator[int]:
    """A live process standing in for the dev that wrote the env file (not this one: an env file
    written by the reading process itself does not count as a running dev)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process.pid
    process.kill()
    process.wait(timeout=10)


@pytest.fixture
def dev(
    moto_endpoint: MotoEndpoint,
    database_url: str,
    dev_owner: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """The env file a running dev leaves in its folder, and its registry secret in moto."""
    secrets = boto3.client(
        "secretsmanager",
        region_name=REGION,
        endpoint_url=moto_endpoint.url,
        aws_access_key_id="dev",
        aws_secret_access_key="dev",
    )
    arn = secrets.create_secret(
        Name=f"{tmp_path.name}/providers-registry", SecretString=INITIAL_TEXT
    )["ARN"]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    env = {
        "DATABASE_URL": database_url,
        "AWS_ENDPOINT_URL": moto_endpoint.url,
        "AWS_ACCESS_KEY_ID": "dev",
        "AWS_SECRET_ACCESS_KEY": "dev",
        "AWS_REGION": REGION,
        "PROVIDERS_CONFIG_FILE": str(SAMPLE_PROVIDERS),
        "PROVIDERS_REGISTRY_ARN": arn,
    }
    env_file = Path(DEFAULT_ENV_FILE)
    write_env_file(env_file, env)
    # As if dev_owner had written it: the file names its writer's pid.
    env_file.write_text(env_file.read_text().replace(f"pid {os.getpid()}", f"pid {dev_owner}"))
    return lambda: json.loads(secrets.get_secret_value(SecretId=arn)["SecretString"])


def run(capsys: pytest.CaptureFixture[str], *argv: str, stdin: str = "") -> tuple[int, str, str]:
    capsys.readouterr()
    sys.stdin = io.StringIO(stdin)
    try:
        code = main(["providers", *argv])
    finally:
        sys.stdin = sys.__stdin__
    out, err = capsys.readouterr()
    return code, out, err


def test_without_stack_the_running_devs_registry_is_changed(
    dev: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "add", "newco", "--scheme", "github", "--secret-stdin", stdin=SECRET
    )
    assert code == 0, err
    assert "the local webhook-inbox dev" in out
    document = dev()
    sample = json.loads(SAMPLE_PROVIDERS.read_text())["providers"]
    # dev's providers file was imported first, unchanged, beside the new provider.
    assert set(document["providers"]) == {*sample, "newco"}
    assert document["providers"]["stripe"] == sample["stripe"]
    assert SECRET not in out + err


def test_list_counts_a_providers_deliveries_from_the_devs_database(
    dev: Any, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        for event_id in ("evt_1", "evt_2"):
            seed_event(conn, event_id, provider="stripe")
        conn.execute("UPDATE webhook_events SET delivery_count = 3 WHERE event_id = 'evt_1'")
    code, out, err = run(capsys, "list", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["counts_from"] == "database"
    stripe = next(p for p in listed["providers"] if p["name"] == "stripe")
    assert (stripe["accepted_24h"], stripe["duplicates_24h"]) == (2, 2)
    assert stripe["last_delivery_at"] is not None
    # Rejected deliveries are not stored: only a stack's metrics count them.
    assert stripe["rejected_24h"] is None
    assert any("--stack" in note for note in listed["notes"])
    github = next(p for p in listed["providers"] if p["name"] == "github")
    assert (github["accepted_24h"], github["duplicates_24h"]) == (0, 0)


def test_sign_and_send_sign_for_what_the_devs_ingest_serves(
    dev: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before any `providers` write, the dev serves (and the tools sign for) its providers file.
    assert signing.load_registry(None).get("newco") is None
    assert signing.load_registry(None).get("stripe") is not None
    code, _, err = run(capsys, "add", "newco", "--scheme", "github", "--secret-stdin", stdin=SECRET)
    assert code == 0, err
    # From then on its registry: the new provider, signed with the secret typed in.
    provider = signing.load_registry(None)["newco"]
    assert provider.secrets() == [SECRET]
    assert providers.sign_delivery(provider, b"{}", event_type="push").headers
