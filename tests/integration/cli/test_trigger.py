"""`webhook-inbox trigger` over the real console script (issue 29 item 1), against a loopback
receiver that verifies every delivery with the provider's configuration, and the dev env file
that lets `trigger`, `sign` and `send` act on what a running dev serves (item 4)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli.conftest import CONSOLE_SCRIPT, run_console_script
from tests.support import ROOT
from webhook_inbox.ingest import providers, schemes
from webhook_inbox_tools import sample_events
from webhook_inbox_tools.dev.env_file import write_env_file

SAMPLE = ROOT / "events" / "providers.local.json"


@dataclass
class Receiver:
    """Answers 202 to a delivery the configuration verifies, 401 otherwise; records each."""

    registry: providers.Registry
    status: int = 202
    received: list[tuple[str, str, str]] = field(default_factory=list)  # provider, type, id
    refused: list[str] = field(default_factory=list)
    payloads: list[Any] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> int:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            # Hold each request a moment so that concurrent ones overlap (bounded: 0.05 s).
            self.release.wait(0.05)
            return self._verify(path, headers, body)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _verify(self, path: str, headers: dict[str, str], body: bytes) -> int:
        name = path.split("?", maxsplit=1)[0].rsplit("/", 1)[-1]
        provider = self.registry.get(name)
        if provider is None:
            return 404
        url = f"http://{headers.get('Host', '')}{path}"
        delivery = provider.as_called(schemes.Delivery(headers, body, "POST", url))
        try:
            verified = provider.verify(delivery, now=int(time.time()))
            payload = verified.payload or provider.scheme.parse(delivery)
            found = provider.scheme.identify(delivery, payload, verified)
        except Exception as exc:  # noqa: BLE001 - recorded, and answered as ingest would
            with self.lock:
                self.refused.append(f"{type(exc).__name__}: {exc}")
            return 401
        assert isinstance(found, list)
        with self.lock:
            self.received += [(name, i.event_type, i.event_id) for i in found]
            self.payloads.append(payload)
        return self.status


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    state = Receiver(providers.load_config_text(SAMPLE.read_text()))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = state.handle(self.path, dict(self.headers.items()), body)
            payload = json.dumps({"status": "seen"}).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def trigger(*argv: str, cwd: Path | None = None) -> Any:
    env = {"PROVIDERS_CONFIG_FILE": "", "PROVIDERS_CONFIG": "", "WEBHOOK_INBOX_URL": ""}
    if cwd is None:
        return run_console_script("trigger", *argv, env=env)
    full = {**os.environ, **env}
    full.pop("DATABASE_URL", None)
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "trigger", *argv], env=full, cwd=cwd, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip


REGISTRY = providers.load_config_text(SAMPLE.read_text())


# One provider per scheme (a discord one per endpoint kind): each run is a process start.
ONE_PER_KIND = sorted(
    {(p.scheme.name, str(p.scheme.options.get("endpoint"))): n for n, p in sorted(
        REGISTRY.providers.items(), reverse=True)}.values()
)  # fmt: skip


@pytest.mark.parametrize("name", ONE_PER_KIND)
def test_every_provider_kind_of_the_sample_config_triggers_a_verified_event(
    receiver: tuple[Receiver, str], name: str
) -> None:
    state, url = receiver
    event_type = sample_events.event_types(REGISTRY.providers[name])[0]
    done = trigger(name, event_type, "--url", url)
    assert done.returncode == 0, done.stdout + done.stderr + "\n".join(state.refused)
    assert f"[{event_type}]" in done.stdout
    assert "202 Accepted" in done.stdout
    assert {(p, t) for p, t, _ in state.received} == {(name, event_type)}
    # The id it prints is the key the event is stored under (a digest for GitHub, Shopify and
    # a generic sender without id_path), so `events show` and `replay` take it.
    stored = state.received[0][2]
    assert f"[{event_type}] {stored} -> 202" in done.stdout


def test_overrides_reach_the_body(receiver: tuple[Receiver, str], tmp_path: Path) -> None:
    state, url = receiver
    done = trigger("stripe", "customer.created", "--url", url, "--json",
                   "--override", "data.object.id=cus_1", "--override", "livemode=true")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answers"][0]["status"] == 202
    assert state.received[0][1] == "customer.created"
    assert state.payloads[0]["data"]["object"]["id"] == "cus_1"
    assert state.payloads[0]["livemode"] is True


def test_count_sends_fresh_events_with_bounded_concurrency(receiver: tuple[Receiver, str]) -> None:
    state, url = receiver
    done = trigger("github", "push", "--url", url, "--count", "12", "--concurrency", "3")
    assert done.returncode == 0, done.stderr
    assert len(state.received) == 12
    assert len({event_id for _, _, event_id in state.received}) == 12  # each one fresh
    assert 1 <= state.most_in_flight <= 3
    assert "x12, 3 at a time" in done.stdout
    assert "202 Accepted x12" in done.stdout
    assert "p50" in done.stdout


def test_a_refused_answer_exits_1_and_is_shown(receiver: tuple[Receiver, str]) -> None:
    state, url = receiver
    state.status = 409
    done = trigger("stripe", "customer.created", "--url", url)
    assert done.returncode == 1
    assert "-> 409 Conflict" in done.stdout


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["nope", "customer.created"], "unknown provider 'nope'"),
        (["stripe", "no.such.type"], "no sample 'no.such.type' for stripe"),
        (["stripe", "customer.created", "--override", "no-equals"], "expected FIELD=VALUE"),
        (["stripe", "customer.created", "--override", "type.x=1"], "not an object"),
        (["stripe", "customer.created", "--concurrency", "999"], "at most 32"),
        (["stripe"], "give PROVIDER and EVENT_TYPE"),
    ],
    ids=["provider", "type", "override", "override-path", "concurrency", "no-type"],
)
def test_usage_errors_exit_2_with_one_line(argv: list[str], says: str) -> None:
    done = trigger(*argv, "--url", "http://127.0.0.1:9")
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_url_exits_2_and_says_so() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = trigger("stripe", "customer.created", "--url", f"http://127.0.0.1:{port}")
    assert done.returncode == 2
    assert f"cannot reach http://127.0.0.1:{port}/webhooks/stripe" in done.stderr


def test_without_a_running_dev_or_url_it_says_what_to_do(tmp_path: Path) -> None:
    done = trigger("stripe", "customer.created", cwd=tmp_path)
    assert done.returncode == 2
    assert "no webhook-inbox dev is running from this folder" in done.stderr


def test_list_shows_types_and_handlers_per_provider() -> None:
    done = trigger("--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "stripe (stripe)" in lines
    assert any("customer.created" in line and "stripe_customer_created" in line for line in lines)
    assert any(line.strip().startswith("payment_intent.succeeded") for line in lines)
    assert "github (github)" in lines


def _dev_env_file(folder: Path, url: str, config: Path) -> None:
    """An env file as a running dev writes it (this test process stands for that dev)."""
    write_env_file(
        folder / ".webhook-inbox-dev.env",
        {"WEBHOOK_INBOX_URL": url, "PROVIDERS_CONFIG_FILE": str(config)},
    )


def test_trigger_sign_and_send_act_on_what_the_running_dev_serves(
    receiver: tuple[Receiver, str], tmp_path: Path
) -> None:
    # A provider only this dev serves: not in the sample configuration.
    state, url = receiver
    config = tmp_path / "providers.json"
    secret = "whsec_ZGV2LW9ubHktaXNzdWUtMjktc2VjcmV0"
    config.write_text(json.dumps({"providers": {"only-here": {
        "scheme": "standard-webhooks", "secrets": [{"value": secret}]}}}))  # fmt: skip
    state.registry = providers.load_config_text(config.read_text())
    _dev_env_file(tmp_path, url, config)

    done = trigger("only-here", "customer.created", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert state.received[-1][:2] == ("only-here", "customer.created")

    body = tmp_path / "body.json"
    body.write_text('{"type": "customer.created", "data": {"id": "cus_1"}}')
    env = {k: v for k, v in os.environ.items()
           if k not in {"PROVIDERS_CONFIG", "PROVIDERS_CONFIG_FILE", "DATABASE_URL"}}  # fmt: skip
    for argv in (["sign", "only-here", "body.json"], ["send", url, "only-here", "body.json"]):
        ran = subprocess.run([str(CONSOLE_SCRIPT), *argv], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr  # main: "unknown provider"
    assert len(state.received) == 2
    # sign's curl goes where that dev listens (not the default port 3000).
    curl = subprocess.run([str(CONSOLE_SCRIPT), "sign", "only-here", "body.json", "--format",
                           "curl"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, check=True).stdout  # fmt: skip
    assert f"curl -sS -i -X POST {url}/webhooks/only-here" in curl

    # A file left by a dev that is gone points nowhere: ignored.
    stale = (tmp_path / ".webhook-inbox-dev.env").read_text()
    (tmp_path / ".webhook-inbox-dev.env").write_text(stale.replace(f"pid {os.getpid()}", "pid 0"))
    done = trigger("only-here", "customer.created", cwd=tmp_path)
    assert done.returncode == 2
