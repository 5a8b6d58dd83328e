"""Issue 29 over a real `webhook-inbox dev`: `trigger` from the second shell reaches the stack
and its events are processed (item 1); the console says why each refused delivery was refused,
with a stale timestamp's correct direction, and names the providers and handlers it serves
(item 2); every command dev prints works as printed for a secret, a token and a public-key-only
provider, and the env file lets the second shell sign for exactly what dev serves (item 4).

Waits poll the database for the state they assert; the console lines asserted are printed before
the HTTP answer is sent, so they are there once the sender has its answer.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.e2e.dev_support import DevProcess, clean_env, post
from tests.e2e.test_dev_lifecycle import _printed_samples, _run_curl, start, started, wait_until
from tests.e2e.test_dev_startup import _public_key_config
from tests.integration.cli.conftest import CONSOLE_SCRIPT
from tests.support import ROOT

__all__ = ["started"]  # the fixture, imported for pytest

SAMPLE = ROOT / "events" / "providers.local.json"
THREE_YEARS_S = 3 * 365 * 24 * 3600
TUNNEL = "https://sample-tunnel.trycloudflare.com"


def signer(folder: Path, name: str) -> Path:
    """A configuration that signs as Twilio would for the tunnel's URL."""
    path = folder / f"signer-{name}.json"
    path.write_text(json.dumps({"providers": {name: {
        "scheme": "twilio", "secrets": [{"value": "dev-only-twilio-token-issue-29"}],
        "public_url": f"{TUNNEL}/webhooks/{name}"}}}))  # fmt: skip
    return path


def run(
    *argv: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *argv], cwd=cwd, env=env or clean_env(), capture_output=True,
        text=True, timeout=60, check=False, input=stdin,
    )  # fmt: skip


def row(database_url: str, sql: str, *params: Any) -> Any:
    with psycopg.connect(database_url) as conn:
        return conn.execute(sql, params).fetchone()


def status_of(database_url: str, provider: str, event_id: str) -> str | None:
    found = row(
        database_url,
        "SELECT status FROM webhook_events WHERE provider = %s AND event_id = %s",
        provider,
        event_id,
    )
    return found[0] if found else None


def ingest_lines(dev: DevProcess) -> list[str]:
    dev.mentioned(r"(.)")  # read everything printed so far
    return [line for line in dev.transcript if re.match(r"ingest\s+\|", line)]


def printed(dev: DevProcess, pattern: str) -> None:
    """``pattern`` on a line already read, else on one printed within 10 s."""
    if not dev.mentioned(f"({pattern})"):
        dev.wait_for(pattern, timeout=10)


def test_trigger_reaches_dev_and_the_console_says_why_deliveries_are_refused(
    started: list[DevProcess], tmp_path: Path
) -> None:
    dev = start(started, cwd=tmp_path)
    port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")
    base = f"http://127.0.0.1:{port}"

    # The banner: each provider with its scheme and the handlers registered for it.
    stripe = dev.mentioned(r"dev\s+\|\s+stripe \(stripe\): (.*)$")
    assert stripe, dev.transcript
    assert "customer.created -> stripe_customer_created" in stripe[0]
    assert dev.mentioned(r"dev\s+\|\s+github \(github\): (.*)$") == [
        "no handlers (its events are ignored)"
    ]

    # trigger, from dev's folder with nothing loaded: it finds the stack from the env file.
    done = run("trigger", "stripe", "customer.created", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    event_id = re.search(r"\] (evt_\w+) -> 202 Accepted", done.stdout)
    assert event_id, done.stdout
    wait_until(
        lambda: status_of(database_url, "stripe", event_id[1]) == "processed", 30, "processed"
    )
    # Certificate senders: the sample providers pin their development certificates, so what
    # trigger signs is verified by the dev's ingest without fetching anything (SNS answers 200).
    for sender, event_type, answer in (
        ("sns", "Bounce", "200"),
        ("paypal", "PAYMENT.CAPTURE.COMPLETED", "202"),
    ):
        sent = run("trigger", sender, event_type, cwd=tmp_path)
        assert f"-> {answer}" in sent.stdout, sent.stdout + sent.stderr
        stored = re.search(rf"\[{re.escape(event_type)}\] (\S+) -> {answer}", sent.stdout)
        assert stored, sent.stdout
        # Stored before the answer (the claim commits first): no wait.
        assert status_of(database_url, sender, stored[1]) is not None, sent.stdout
    # The console tells a handler that changed something from one that changed nothing: the
    # same customer twice, as two events (the second's guarded insert changes no row).
    same: list[str] = []
    for _ in range(2):
        sent = run("trigger", "stripe", "customer.created", "--override",
                   "data.object.id=cus_console_twice", cwd=tmp_path)  # fmt: skip
        found = re.search(r"\] (evt_\w+) -> 202 Accepted", sent.stdout)
        assert found, sent.stdout + sent.stderr
        same.append(found[1])
        wait_until(lambda: status_of(database_url, "stripe", same[-1]) == "processed", 30, "done")
    dev.wait_for(rf"stripe/{same[0]} \[customer\.created\] \S+ -> processed attempt 1$",
                 timeout=30)  # fmt: skip
    dev.wait_for(rf"stripe/{same[1]} \[customer\.created\] \S+ -> processed attempt 1, no change$",
                 timeout=30)  # fmt: skip
    # Into the dev database, from dev's folder: the URL, and psql on it.
    url = run("psql", "--url", cwd=tmp_path)
    assert (url.returncode, url.stdout.strip()) == (0, database_url), url.stderr
    query = "SELECT provider, event_id, status FROM webhook_events"
    looked = run("psql", "--", "-At", "-c", query, cwd=tmp_path)
    assert looked.returncode == 0, looked.stderr
    assert f"stripe|{event_id[1]}|processed" in looked.stdout.splitlines()
    # ... with an override, seen by the handler.
    done = run("trigger", "example", "subscription.updated", "--override", "data.status=past_due",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    wait_until(
        lambda: (
            row(database_url, "SELECT count(*) FROM subscriptions WHERE status = 'past_due'")
            == (1,)
        ),
        30,
        "the overridden status applied",
    )
    # ... and as load: every one stored.
    done = run("trigger", "github", "push", "--count", "8", "--concurrency", "4", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "202 Accepted x8" in done.stdout
    wait_until(
        lambda: (
            row(database_url, "SELECT count(*) FROM webhook_events WHERE provider = 'github'")
            == (8,)
        ),
        30,
        "eight github events",
    )

    # Refusals, each with its reason in words.
    body = tmp_path / "old.json"
    body.write_text(json.dumps({"id": "evt_old_1", "object": "event", "type": "customer.created",
                                "data": {"object": {"id": "cus_secret_payload"}}}))  # fmt: skip
    old = str(int(time.time()) - THREE_YEARS_S)
    sent = run("send", base, "stripe", str(body), "--timestamp", old, cwd=tmp_path)
    assert "-> 401" in sent.stdout, sent.stdout + sent.stderr
    wrong = tmp_path / "wrong-secret"
    wrong.write_text("whsec_not_the_configured_one")
    sent = run("send", base, "stripe", str(body), "--signing-key-file", str(wrong), cwd=tmp_path)
    assert "-> 401" in sent.stdout, sent.stdout + sent.stderr
    assert post(f"{base}/webhooks/nope", {"Content-Type": "application/json"}, b"{}") == 404
    big = b'{"pad": "' + b"x" * (1024 * 1024 + 10) + b'"}'
    assert post(f"{base}/webhooks/stripe", {"Content-Type": "application/json"}, big) == 413

    # Each line is printed before its answer is sent; the reader thread may still be behind.
    for pattern in (
        r"-> 401 \(\d+ ms\): stale: timestamp \d+s in the past, tolerance 300s",
        r"-> 401 \(\d+ ms\): no matching signature",
        r"-> 404 \(\d+ ms\): unknown provider 'nope'",
        r"-> 413 \(\d+ ms\): body too large",
    ):
        printed(dev, rf"ingest\s+\| POST /webhooks/\w+ {pattern}")
    lines = ingest_lines(dev)
    # Never a secret, never payload content.
    secrets = [s["value"] for p in json.loads(SAMPLE.read_text())["providers"].values()
               for s in p["secrets"]]  # fmt: skip
    for line in lines:
        assert "cus_secret_payload" not in line
        assert "whsec_not_the_configured_one" not in line
        assert not any(secret in line for secret in secrets), line
    # A state change names the event and its type.
    assert dev.mentioned(rf"(stripe/{event_id[1]} \[customer\.created\] \S+ -> processed)")

    # dev keeps what it refused, in its database: `events rejected` lists it, newest first.
    env = {**clean_env(), "DATABASE_URL": database_url}
    listed = run("events", "rejected", "--json", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    refused = json.loads(listed.stdout)["rejected"]
    assert [(r["provider"], r["status"], r["reason"]) for r in refused][:4] == [
        ("stripe", 413, "size"),
        ("nope", 404, "unknown_provider"),
        ("stripe", 401, "signature"),
        ("stripe", 401, "stale"),
    ]
    assert "cus_secret_payload" not in listed.stdout
    assert "whsec_not_the_configured_one" not in listed.stdout
    # ... and providers list counts it as stripe's rejections.
    counted = run("providers", "list", "--json", cwd=tmp_path, env=env)
    assert counted.returncode == 0, counted.stderr
    stripe = next(p for p in json.loads(counted.stdout)["providers"] if p["name"] == "stripe")
    assert stripe["rejected_24h"] == 3

    # A provider added against the running dev: the console says when it is served.
    added = run("providers", "add", "newco", "--scheme", "github", "--secret-stdin",
                cwd=tmp_path, env=env, stdin="a-new-dev-secret")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "live in the running dev within a second" in added.stdout
    assert "imported the providers file dev started with first" in added.stdout
    printed(dev, r"dev\s+\| providers: add newco by \S+: served from \d\d:\d\d:\d\d")


def test_every_command_dev_prints_works_as_printed_for_every_provider_kind(
    started: list[DevProcess], tmp_path: Path
) -> None:
    config, keys = _public_key_config(tmp_path)  # sg, bot, example: public keys only
    document = json.loads(config.read_text())
    document["providers"]["tok"] = {  # a token provider (GitLab's X-Gitlab-Token)
        "scheme": "gitlab",
        "secrets": [{"value": "dev-only-token-NOT-FOR-PRODUCTION"}],
    }
    document["providers"]["hooks"] = {  # a secret
        "scheme": "stripe", "secrets": [{"value": "whsec_dev_only_issue_29"}]}  # fmt: skip
    # A URL-signed provider behind a tunnel (docs/local.md): public_url is the URL it calls.
    twilio = {"scheme": "twilio", "secrets": [{"value": "dev-only-twilio-token-issue-29"}]}
    document["providers"]["sms"] = {**twilio, "public_url": TUNNEL + "/webhooks/sms"}
    document["providers"]["sms-no-public-url"] = twilio
    config.write_text(json.dumps(document))
    dev = start(started, "--providers", str(config), cwd=tmp_path)
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    samples = _printed_samples(dev)

    # The secret, the token and the URL-signed one: a curl each, accepted (Twilio: 200 TwiML).
    assert sorted(name for name, _ in samples) == ["hooks", "sms", "tok"]
    for name, command in samples:
        assert _run_curl(command) == (200 if name == "sms" else 202), name
    # As the tunnel forwards it: signed for the tunnel's URL, received on loopback. Accepted
    # with public_url; without it, refused, and the console says why.
    for name, expected in (("sms", "200"), ("sms-no-public-url", "401")):
        done = run("trigger", name, "message.delivered", "--providers", str(signer(tmp_path, name)),
                   cwd=tmp_path)  # fmt: skip
        assert f"-> {expected}" in done.stdout, done.stdout + done.stderr
    printed(dev, r"POST /webhooks/sms-no-public-url -> 401 .*no matching signature")
    # Public keys only: a trigger command each, which works as printed once KEY is a key file.
    commands = dev.mentioned(r"with the private key in KEY: (.+)$")
    assert len(commands) == 3, dev.transcript
    for command in commands:
        name = command.split()[2]
        ran = subprocess.run(["bash", "-c", command.replace(" KEY", f" {keys[name]}")],
                             cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                             timeout=60, check=False)  # fmt: skip
        assert ran.returncode == 0, command + "\n" + ran.stdout + ran.stderr
        assert re.search(r"-> 20[024]", ran.stdout), ran.stdout
    # Every other command it printed: the trigger hint and loading the env file.
    hint = dev.mentioned(r"dev\s+\|\s+(\S+ trigger --list)")
    assert hint
    listed = subprocess.run(["bash", "-c", hint[0]], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert "tok (gitlab)" in listed.stdout
    assert "bot (discord)" in listed.stdout

    # A second shell elsewhere with the env file loaded signs for exactly what dev serves.
    env_file = tmp_path / ".webhook-inbox-dev.env"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "body.json").write_text(json.dumps(
        [{"email": "a@example.com", "event": "delivered", "sg_event_id": "sg_29",
          "sg_message_id": "m.29", "timestamp": int(time.time())}]))  # fmt: skip
    shell = (
        f'set -a; . "{env_file}"; set +a; '
        f'"{CONSOLE_SCRIPT}" sign sg body.json --signing-key-file "{keys["sg"]}" --format curl '
        f'--url "$WEBHOOK_INBOX_URL" | bash; '
        f'"{CONSOLE_SCRIPT}" trigger tok "Merge Request Hook"'
    )
    ran = subprocess.run(["bash", "-c", shell], cwd=elsewhere, env=clean_env(),
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "HTTP/1.1 202" in ran.stdout, ran.stdout + ran.stderr
    assert "-> 202 Accepted" in ran.stdout

    def every_kind_stored() -> bool:
        with psycopg.connect(database_url) as conn:
            names = {r[0] for r in conn.execute("SELECT DISTINCT provider FROM webhook_events")}
        return names == {"hooks", "tok", "sg", "bot", "example", "sms"}

    wait_until(every_kind_stored, 30, "an event from every provider")
