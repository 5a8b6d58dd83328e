"""`sign` checked by the providers' official libraries and by the real ingest handler; `send`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.cli.conftest import run_console_script
from tests.support import ROOT, FakeLambdaContext
from webhook_inbox_tools.cli import main

SAMPLE = ROOT / "events" / "providers.local.json"
SECRETS = {
    name: spec["secrets"][0]["value"]
    for name, spec in json.loads(SAMPLE.read_text())["providers"].items()
}


@pytest.fixture
def body_file(tmp_path: Path) -> Path:
    path = tmp_path / "event.json"
    path.write_bytes(
        b'{"id":"evt_cli_1","type":"customer.created","data":{"object":{"id":"cus_1"}}}'
    )
    return path


def _sign(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    assert main(["sign", *argv, "--providers", str(SAMPLE)]) == 0
    return json.loads(capsys.readouterr().out)


def test_stripe_signature_verifies_with_the_stripe_library(
    body_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import stripe

    headers = _sign(capsys, "stripe", str(body_file), "--format", "json")["headers"]
    stripe.WebhookSignature.verify_header(
        body_file.read_text(), headers["Stripe-Signature"], SECRETS["stripe"], tolerance=300
    )


def test_standard_webhooks_signature_verifies_with_standardwebhooks_and_svix(
    body_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from standardwebhooks.webhooks import Webhook as StandardWebhook
    from svix.webhooks import Webhook as SvixWebhook

    signed = _sign(capsys, "svix", str(body_file), "--format", "json", "--event-id", "msg_1")
    headers = {k.lower(): v for k, v in signed["headers"].items()}
    assert headers["webhook-id"] == "msg_1"
    StandardWebhook(SECRETS["svix"]).verify(body_file.read_bytes(), headers)
    SvixWebhook(SECRETS["svix"]).verify(body_file.read_bytes(), headers)


def test_slack_signature_verifies_with_slack_sdk(
    body_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from slack_sdk.signature import SignatureVerifier

    headers = _sign(capsys, "slack", str(body_file), "--format", "json")["headers"]
    lower = {k.lower(): v for k, v in headers.items()}
    assert SignatureVerifier(SECRETS["slack"]).is_valid(
        body_file.read_bytes(),
        lower["x-slack-request-timestamp"],
        lower["x-slack-signature"],
    )


def test_github_and_shopify_signatures_match_their_documented_recipes(
    body_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = body_file.read_bytes()
    github = _sign(capsys, "github", str(body_file), "--format", "json", "--type", "push")[
        "headers"
    ]
    expected = hmac.new(SECRETS["github"].encode(), body, hashlib.sha256).hexdigest()
    assert github["X-Hub-Signature-256"] == f"sha256={expected}"
    shopify = _sign(
        capsys, "shopify", str(body_file), "--format", "json", "--type", "orders/create"
    )["headers"]
    digest = hmac.new(SECRETS["shopify"].encode(), body, hashlib.sha256).digest()
    assert shopify["X-Shopify-Hmac-Sha256"] == base64.b64encode(digest).decode()


@pytest.mark.parametrize("shape", ["apigw-v2", "apigw-v1"])
def test_signed_api_gateway_event_is_accepted_by_the_ingest_handler(
    shape: str,
    body_file: Path,
    capsys: pytest.CaptureFixture[str],
    ingest_env: tuple[Any, Any, str],
    conn: psycopg.Connection[Any],
) -> None:
    app, sqs, url = ingest_env
    event = _sign(capsys, "stripe", str(body_file), "--format", shape)

    reply = app.handler(event, FakeLambdaContext())

    assert reply["statusCode"] == 202, reply
    stored = conn.execute("SELECT provider, event_id, status FROM webhook_events").fetchall()
    assert stored == [("stripe", "evt_cli_1", "received")]
    assert len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]) == 1
    tampered = dict(event, body=event["body"].replace("cus_1", "cus_2"))
    assert app.handler(tampered, FakeLambdaContext())["statusCode"] == 401


def test_curl_format_sends_the_file_bytes(
    body_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sign", "github", str(body_file), "--providers", str(SAMPLE), "--type", "push"]
    assert main([*argv, "--format", "curl"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("curl -sS -i -X POST http://127.0.0.1:3000/webhooks/github")
    assert f"--data-binary @{body_file}" in out
    assert "X-Hub-Signature-256: sha256=" in out


@pytest.mark.parametrize(("provider", "header"), [("github", "X-GitHub-Event"),
                                                  ("shopify", "X-Shopify-Topic")])  # fmt: skip
def test_a_sender_typing_its_events_in_a_header_needs_a_type_to_sign(
    provider: str, header: str, body_file: Path
) -> None:
    # Without it ingest would answer the delivery 400: no delivery at all is clearer.
    result = run_console_script("sign", provider, str(body_file), "--providers", str(SAMPLE))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {provider}: {provider} carries the event type in {header}, "
        "not in the body: pass --type"
    ]
    assert result.stdout == ""


@pytest.mark.parametrize("provider", ["mailgun", "linear"])
def test_headers_alone_are_refused_where_the_signature_covers_a_rewritten_body(
    provider: str, tmp_path: Path
) -> None:
    # Mailgun signs inside the body, Linear signs the body with webhookTimestamp added: the
    # headers would sign bytes the user never sees, and sending the file with them fails.
    body_file = tmp_path / "event.json"
    body_file.write_text('{"type": "Issue", "action": "create", "data": {"id": "i_1"}}')
    argv = ("sign", provider, str(body_file), "--providers", str(SAMPLE))
    refused = run_console_script(*argv, "--format", "headers")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"error: {provider} signs inside the body, so the signed body is not BODY_FILE: "
        "use --format json (headers and body) or --format curl"
    ]
    shown = run_console_script(*argv, "--format", "json")
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["body"] != body_file.read_text()  # the body that was signed


def test_unknown_provider_is_a_usage_error_without_traceback(body_file: Path) -> None:
    result = run_console_script("sign", "nope", str(body_file), "--providers", str(SAMPLE))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "unknown provider 'nope'" in result.stderr
    assert "stripe" in result.stderr  # it lists the configured ones


def test_missing_body_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run_console_script("sign", "stripe", str(tmp_path / "missing.json"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


class _Recorder(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, str], bytes]] = []
    answer = 202

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Recorder.received.append((self.path, dict(self.headers.items()), body))
        self.send_response(_Recorder.answer)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.received = []
    _Recorder.answer = 202
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_send_posts_the_signed_bytes(body_file: Path, receiver: str) -> None:
    result = run_console_script(
        "send", receiver, "stripe", str(body_file), "--providers", str(SAMPLE)
    )
    assert result.returncode == 0, result.stderr
    assert "-> 202" in result.stdout
    [(path, headers, body)] = _Recorder.received
    assert path == "/webhooks/stripe"
    assert body == body_file.read_bytes()
    timestamp = int(headers["Stripe-Signature"].split(",")[0][2:])
    assert abs(timestamp - time.time()) < 60


def test_send_exits_1_on_a_non_2xx_answer(body_file: Path, receiver: str) -> None:
    _Recorder.answer = 401
    result = run_console_script(
        "send", receiver, "stripe", str(body_file), "--providers", str(SAMPLE)
    )
    assert result.returncode == 1
    assert "-> 401" in result.stdout


def test_send_to_nothing_fails_cleanly(body_file: Path) -> None:
    result = run_console_script(
        "send", "http://127.0.0.1:9", "stripe", str(body_file), "--providers", str(SAMPLE)
    )
    assert result.returncode == 1
    assert "cannot reach http://127.0.0.1:9/webhooks/stripe" in result.stderr
    assert "Traceback" not in result.stderr
