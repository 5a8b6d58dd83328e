"""`webhook-inbox dev` under supervisors, concurrent senders and a second shell (issue 16).

Each test starts the real command in its own process group, as a terminal, systemd or foreman
would, and checks what a user sees: the processes, the PostgreSQL data folder, sockets, output.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from tests.e2e.dev_support import (
    DevProcess,
    clean_env,
    post,
    processes_mentioning,
    session_processes,
    wait_until,
)
from tests.integration.cli.conftest import CONSOLE_SCRIPT
from tests.support import ROOT
from webhook_inbox.ingest import provider_registry, providers
from webhook_inbox_tools.cli.params import operator_name
from webhook_inbox_tools.dev.env_file import running_dev_environment
from webhook_inbox_tools.dev.reaper import stop_postgres

SAMPLE = ROOT / "events" / "providers.local.json"
# "Within a few seconds": measured 1.9-3.7 s with the machine loaded (load average 5 on 2 cores);
# the bound leaves shared CI machines headroom.
STOP_WITHIN_S = 20


@pytest.fixture
def started() -> Iterator[list[DevProcess]]:
    """Every dev process a test starts: stopped if the test did not stop it (:func:`_stop`),
    and its working folder removed."""
    processes: list[DevProcess] = []
    yield processes
    for process in processes:
        _stop(process)
        process.remove_folder()


def _stop(process: DevProcess) -> None:
    """As a user would (Ctrl-C) if the test did not stop it; killed, group and all, only if that
    fails — and then its PostgreSQL too, since a SIGKILL to the group takes the reaper that would
    stop it."""
    if process.proc.poll() is None:
        os.kill(process.proc.pid, signal.SIGINT)
        try:
            process.proc.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.proc.pid, signal.SIGKILL)
            process.proc.wait(timeout=10)
            for pg_dir in process.mentioned(r"started a throwaway PostgreSQL in (\S+)"):
                stop_postgres(Path(pg_dir))
                shutil.rmtree(pg_dir, ignore_errors=True)


def start(started: list[DevProcess], *args: str, cwd: Path | None = None) -> DevProcess:
    process = DevProcess(*args, cwd=cwd)
    started.append(process)
    return process


def nothing_left(pid: int, pg_dir: str) -> bool:
    return (
        session_processes(pid) == []
        and processes_mentioning(pg_dir) == []
        and not Path(pg_dir).exists()
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=str)
@pytest.mark.parametrize("target", ["leader", "group"])
def test_any_stop_signal_to_leader_or_group_stops_everything(
    started: list[DevProcess], signum: signal.Signals, target: str
) -> None:
    dev = start(started)
    pg_dir = dev.wait_for(r"started a throwaway PostgreSQL in (\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")

    began = time.monotonic()
    if target == "group":  # systemd's default, foreman/honcho, `kill -- -PGID`
        os.killpg(dev.proc.pid, signum)
    else:
        os.kill(dev.proc.pid, signum)
    assert dev.proc.wait(timeout=STOP_WITHIN_S) == 0
    assert time.monotonic() - began < STOP_WITHIN_S
    dev.wait_for(r"dev\s+\| stopped", timeout=5)
    wait_until(lambda: nothing_left(dev.proc.pid, pg_dir), 5, "no process, no data folder")


def test_a_sigkilled_leader_leaves_no_postgres_and_no_data_folder(
    started: list[DevProcess],
) -> None:
    dev = start(started)
    pg_dir = dev.wait_for(r"started a throwaway PostgreSQL in (\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")
    assert processes_mentioning(pg_dir) != []  # the server runs outside the process tree

    os.kill(dev.proc.pid, signal.SIGKILL)
    dev.proc.wait(timeout=5)
    wait_until(lambda: nothing_left(dev.proc.pid, pg_dir), 20, "children and PostgreSQL gone")


def _stripe_delivery() -> tuple[dict[str, str], bytes]:
    stripe = providers.load_config_text(SAMPLE.read_text())["stripe"]
    body = json.dumps(
        {"id": f"evt_{uuid.uuid4().hex[:12]}", "object": "event", "type": "customer.created",
         "created": int(time.time()), "data": {"object": {"id": f"cus_{uuid.uuid4().hex[:8]}"}}}
    ).encode()  # fmt: skip
    return providers.sign_delivery(stripe, body).headers, body


def test_twenty_concurrent_senders_and_an_idle_keep_alive_client_all_get_answers(
    started: list[DevProcess],
) -> None:
    dev = start(started, "--ingest-concurrency", "4")
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    dev.wait_for(r"ready; Ctrl-C stops everything")

    # A keep-alive client that sends one request and then sits on its connection.
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers, body = _stripe_delivery()
    idle.request("POST", "/webhooks/stripe", body=body, headers=headers)
    first = idle.getresponse()
    first.read()
    assert first.status == 202
    # And one that connected and never said anything.
    silent = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(_: int) -> int:
        headers, body = _stripe_delivery()
        return post(f"http://127.0.0.1:{port}/webhooks/stripe", headers, body)

    try:
        with ThreadPoolExecutor(max_workers=20) as pool:
            statuses = list(pool.map(send, range(20)))
        assert statuses == [202] * 20
        # The idle keep-alive connection still works afterwards.
        headers, body = _stripe_delivery()
        idle.request("POST", "/webhooks/stripe", body=body, headers=headers)
        again = idle.getresponse()
        again.read()
        assert again.status == 202
    finally:
        idle.close()
        silent.close()
    os.killpg(dev.proc.pid, signal.SIGINT)
    assert dev.proc.wait(timeout=STOP_WITHIN_S) == 0


def _printed_samples(dev: DevProcess) -> list[tuple[str, str]]:
    """(provider, curl command) for every sample the console printed before "ready"."""
    samples: list[tuple[str, str]] = []
    dev.wait_for(r"ready; Ctrl-C stops everything")
    lines = dev.transcript
    for i, line in enumerate(lines):
        match = re.search(r"sample \S+ delivery to '([^']+)'", line)
        if not match:
            continue
        command: list[str] = []
        for following in lines[i + 1 :]:
            command.append(following)
            # A command ends at a line without a continuation, outside any quote (a body may
            # hold newlines inside its quotes: SNS sends pretty-printed JSON).
            if not following.endswith("\\") and _complete("\n".join(command)):
                break
        samples.append((match[1], "\n".join(command)))
    return samples


def _complete(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:  # no closing quotation yet
        return False
    return True


def _run_curl(command: str) -> int:
    assert command.startswith("curl ")  # the console printed a curl, and curl is installed
    ran = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=30, check=False
    )
    assert ran.returncode == 0, (ran.returncode, ran.stderr, command[:600])
    out = ran.stdout
    status = re.match(r"HTTP/\S+ (\d{3})", out)
    assert status, out
    return int(status[1])


def _statuses(database_url: str) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT provider, status FROM webhook_events").fetchall()
    return dict(rows)


def test_a_standard_webhooks_only_setup_prints_a_sample_that_gets_processed(
    started: list[DevProcess], tmp_path: Path
) -> None:
    config = tmp_path / "providers.json"
    secret = "whsec_" + "ZGV2LW9ubHktZXhhbXBsZS1zZWNyZXQ="
    config.write_text(json.dumps({"providers": {"example": {
        "scheme": "standard-webhooks", "secrets": [{"value": secret}]}}}))  # fmt: skip
    dev = start(started, "--providers", str(config))
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    samples = _printed_samples(dev)

    assert [provider for provider, _ in samples] == ["example"]
    assert _run_curl(samples[0][1]) == 202
    wait_until(lambda: _statuses(database_url) == {"example": "processed"}, 30, "processed")
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM customers").fetchone() == (1,)

    # Without --verbose the console shows its own lines only: no JSON log line of the
    # functions, not even the warning a rejected delivery logs.
    forged = samples[0][1].replace("v1,", "v1,AAAA", 1)
    assert _run_curl(forged) == 401
    dev.wait_for(r"ingest\s+\| POST /webhooks/example -> 401")
    os.killpg(dev.proc.pid, signal.SIGINT)
    dev.proc.wait(timeout=STOP_WITHIN_S)
    dev.wait_for(r"dev\s+\| stopped", timeout=5)
    assert [line for line in dev.transcript if line.lstrip().startswith("{")] == []


# What a stored sample is answered with where the scheme's own acknowledgement says more than
# its accepted_status (the 202, or the 200 of the senders that count only 200 as success).
ACKNOWLEDGEMENTS = {
    "discord": {200, 204},
    "twilio": {200},  # TwiML
    "adyen": {200},  # [accepted]
}


def test_every_printed_sample_of_the_shipped_config_is_accepted_and_settles(
    started: list[DevProcess],
) -> None:
    dev = start(started)
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    samples = _printed_samples(dev)
    registry = providers.load_config_text(SAMPLE.read_text())
    schemes = {p.scheme.name for p in registry.providers.values()}

    assert len(samples) == len(schemes)  # one per provider family
    assert dev.mentioned(r"(handlers registered for providers not configured)") == []
    for provider, command in samples:
        # A stored event is a 202, or the acknowledgement its sender expects (Discord's
        # deferred interaction response is a 200, its webhook events a 204; Twilio's TwiML,
        # Adyen's [accepted] and every sender that counts only 200 as success: 200).
        scheme = registry[provider].scheme
        expected = ACKNOWLEDGEMENTS.get(scheme.name, {scheme.accepted_status})
        assert _run_curl(command) in expected, provider

    def settled() -> bool:
        statuses = _statuses(database_url)
        return len(statuses) == len(samples) and set(statuses.values()) <= {"processed", "ignored"}

    wait_until(settled, 30, f"every sample processed or ignored: {_statuses(database_url)}")
    assert _statuses(database_url)["stripe"] == "processed"  # the example handlers ran


def processed_at(database_url: str) -> datetime:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT processed_at FROM webhook_events WHERE status = 'processed'")
        found = row.fetchone()
    return found[0] if found else datetime.min.replace(tzinfo=UTC)


def test_operator_commands_from_another_shell_use_the_written_environment(
    started: list[DevProcess], tmp_path: Path
) -> None:
    dev = start(started, cwd=tmp_path)
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    env_file = Path(dev.wait_for(r"operator environment written to (\S+);")[1])
    dev.wait_for(r"ready; Ctrl-C stops everything")
    assert env_file == tmp_path / ".webhook-inbox-dev.env"

    headers, body = _stripe_delivery()
    event_id = json.loads(body)["id"]
    assert post(f"http://127.0.0.1:{port}/webhooks/stripe", headers, body) == 202
    dev.wait_for(rf"stripe/{event_id} \[customer\.created\] .*-> processed", timeout=30)

    first_processed = processed_at(database_url)

    # A second shell: nothing of this process's environment, no $USER (as in a container).
    shell_env = {k: v for k, v in clean_env().items() if k not in {"USER", "LOGNAME"}}
    replay = subprocess.run(
        ["bash", "-c", f'set -a; . "{env_file}"; set +a; '
         f'"{CONSOLE_SCRIPT}" replay stripe {event_id} --reason "dev smoke test"'],
        capture_output=True, text=True, env=shell_env, timeout=60, check=False,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stdout + replay.stderr
    # The replay's wake-up reached the dev stack's queue: the event is processed once more.
    wait_until(lambda: processed_at(database_url) > first_processed, 30, "processed again")
    # ... and the console says so, as it did the first time.
    dev.wait_for(rf"stripe/{event_id} \[customer\.created\] .*processed( again)?", timeout=10)

    with psycopg.connect(database_url) as conn:
        operators = conn.execute("SELECT action, operator FROM operator_actions").fetchall()
    assert operators == [("replay", f"{pwd.getpwuid(os.getuid()).pw_name}@{socket.gethostname()}")]

    _a_provider_written_to_the_registry_is_served(env_file, port)

    os.killpg(dev.proc.pid, signal.SIGTERM)
    assert dev.proc.wait(timeout=STOP_WITHIN_S) == 0
    assert not env_file.exists()  # a stale environment would point at a stack that is gone


def test_operator_commands_in_the_dev_folder_go_through_its_operator_function(
    started: list[DevProcess], tmp_path: Path
) -> None:
    """No database named anywhere: the commands run from dev's folder find its operator URLs in
    its env file and go through the operator function on its gateway, which records the local
    user as the operator, exactly as a deployed stack's records the AWS principal."""
    dev = start(started, cwd=tmp_path)
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")
    headers, body = _stripe_delivery()
    event_id = json.loads(body)["id"]
    assert post(f"http://127.0.0.1:{port}/webhooks/stripe", headers, body) == 202
    dev.wait_for(rf"stripe/{event_id} \[customer\.created\] .*-> processed", timeout=30)
    first_processed = processed_at(database_url)
    shell = {**clean_env(), "USER": "e2e-operator"}  # the CLI's user: not who is recorded

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CONSOLE_SCRIPT), *argv], cwd=tmp_path, env=shell,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    listed = run("events", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["event_id"] for e in json.loads(listed.stdout)["events"]] == [event_id]
    dev.wait_for(r"operator \| POST /operator/read -> 200", timeout=10)
    refused = run("replay", "stripe", event_id, "--reason", "r", "--operator", "bob")
    assert refused.returncode == 2
    assert "--operator does not apply through the webhook-inbox dev running here" in refused.stderr
    replay = run("replay", "stripe", event_id, "--reason", "through dev's operator function")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    dev.wait_for(r"operator \| POST /operator/act -> 200", timeout=10)
    wait_until(lambda: processed_at(database_url) > first_processed, 30, "processed again")
    with psycopg.connect(database_url) as conn:
        operators = conn.execute("SELECT operator FROM operator_actions").fetchall()
    # dev's user (its environment is this one's), never the CLI's $USER or a name it gave
    assert operators == [(f"local:{operator_name(None)}",)]


def _a_provider_written_to_the_registry_is_served(env_file: Path, port: int) -> None:
    """The env file names dev's providers registry and the moto holding it (what the
    `providers` commands use); a document written there is served by dev's ingest within its
    short refresh, and from then on the registry alone decides (the providers file no longer)."""
    import boto3

    written = running_dev_environment(env_file)
    secrets = boto3.client(
        "secretsmanager",
        endpoint_url=written["AWS_ENDPOINT_URL"],
        region_name=written["AWS_REGION"],
        aws_access_key_id=written["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=written["AWS_SECRET_ACCESS_KEY"],
    )
    arn = written["PROVIDERS_REGISTRY_ARN"]
    initial = secrets.get_secret_value(SecretId=arn)["SecretString"]
    assert provider_registry.parse_document(initial).providers is None
    spec = {
        "scheme": "hmac-sha256",
        "secrets": [{"value": "registry-secret-0123456789"}],
        "options": {"signature_header": "X-Acme-Signature"},
    }
    document = provider_registry.RegistryDocument({"acme-live": spec}, [])
    secrets.put_secret_value(SecretId=arn, SecretString=provider_registry.dump_document(document))
    signer = providers.parse_config({"providers": {"acme-live": spec}})["acme-live"]
    body = json.dumps({"id": f"evt_{uuid.uuid4().hex[:12]}", "type": "t"}).encode()
    headers = providers.sign_delivery(signer, body).headers
    url = f"http://127.0.0.1:{port}/webhooks/acme-live"
    wait_until(lambda: post(url, headers, body) == 202, 10, "the registry's provider accepted")
    stripe_headers, stripe_body = _stripe_delivery()
    stripe_url = f"http://127.0.0.1:{port}/webhooks/stripe"
    # Each of dev's ingest processes refreshes on its own second: wait for them all.
    wait_until(
        lambda: all(post(stripe_url, stripe_headers, stripe_body) == 404 for _ in range(8)),
        10,
        "the providers file no longer served",
    )


def test_help_shows_every_default() -> None:
    out = subprocess.run(
        [str(CONSOLE_SCRIPT), "dev", "--help"], capture_output=True, text=True, check=True
    ).stdout
    flat = " ".join(out.split())
    for default in ("(default: 3000)", "(default: 10.0)", "(default: 30)", "(default: 4)",
                    "(default: 127.0.0.1)", "(default: .webhook-inbox-dev.env)"):  # fmt: skip
        assert default in flat, default
