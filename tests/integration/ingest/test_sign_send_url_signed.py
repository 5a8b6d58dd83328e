"""`webhook-inbox sign` and `send` for the URL-signed senders (Twilio, Square, HubSpot) and
Paddle: `send` posts through the local gateway `webhook-inbox dev` runs (real HTTP, the event
it builds, the real ingest handler), `sign` builds API Gateway events ingest accepts, and the
oracles verify what `sign` printed for the URL it was given."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
import pytest
from twilio.request_validator import RequestValidator

from tests.integration.cli.conftest import run_console_script
from tests.integration.ingest.conftest import IngestHarness, secret_of
from tests.support import ROOT
from webhook_inbox_tools.cli import main

SAMPLE = ROOT / "events" / "providers.local.json"
BODIES = {
    "twilio": urlencode({"CallSid": "CA" + "1" * 32, "CallStatus": "completed"}).encode(),
    "twilio-json": b'{"type":"studio.flow","flow":"FW1"}',
    "square": json.dumps(
        {"merchant_id": "M", "type": "payment.updated", "event_id": "sq-cli-1", "data": {}}
    ).encode(),
    "hubspot": json.dumps(
        [{"eventId": 7, "subscriptionType": "deal.creation", "attemptNumber": 0, "objectId": 1}]
    ).encode(),
    "paddle": json.dumps(
        {"event_id": "evt_cli_1", "event_type": "customer.created", "data": {}}
    ).encode(),
}
TYPES = {
    "twilio": "call.completed",
    "twilio-json": "studio.flow",
    "square": "payment.updated",
    "hubspot": "deal.creation",
    "paddle": "customer.created",
}


# TwiML for Twilio's forms and Paddle's documented 200; ingest's 202 for the others.
STATUS = {"twilio": 200, "twilio-json": 202, "square": 202, "hubspot": 202, "paddle": 200}
CASES = sorted(BODIES)


def body_file(tmp_path: Path, case: str) -> tuple[str, Path]:
    """The provider of ``case`` and a file holding its body."""
    path = tmp_path / "body"
    path.write_bytes(BODIES[case])
    return case.removesuffix("-json"), path


def stored(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in conn.execute("SELECT provider, event_type FROM webhook_events")]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("query", ["", "?tenant=acme&note=a%20b"])
def test_send_through_the_dev_gateway_is_accepted(
    dev_gateway: str, conn: psycopg.Connection[Any], tmp_path: Path, *, case: str, query: str
) -> None:
    name, body = body_file(tmp_path, case)
    url = f"{dev_gateway}/webhooks/{name}{query}"
    result = run_console_script("send", url, name, str(body), "--providers", str(SAMPLE), "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["status"] == STATUS[case], answer
    if case == "twilio":  # a form delivery is answered with TwiML
        assert answer["body"] == "<Response/>"
    assert stored(conn) == [(name, TYPES[case])]


@pytest.mark.parametrize("case", ["twilio", "twilio-json"])
def test_sign_prints_what_twilios_validator_accepts_for_the_given_url(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    target = "https://hooks.example.com/webhooks/twilio?tenant=acme"
    _, path = body_file(tmp_path, case)
    argv = ["sign", "twilio", str(path), "--providers", str(SAMPLE), "--format", "json"]
    capsys.readouterr()
    assert main([*argv, "--url", target]) == 0
    signed = json.loads(capsys.readouterr().out)
    signature = signed["headers"]["X-Twilio-Signature"]
    body = path.read_text()
    validator = RequestValidator(secret_of("twilio"))
    if body.startswith("{"):
        assert urlsplit(signed["url"]).query.startswith("tenant=acme&bodySHA256=")
        assert validator.validate(signed["url"], body, signature)
    else:
        assert signed["url"] == target
        assert validator.validate(target, dict(parse_qsl(body)), signature)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("shape", ["apigw-v2", "apigw-v1"])
def test_signed_api_gateway_events_are_accepted_by_ingest(
    harness: IngestHarness,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    *,
    case: str,
    shape: str,
) -> None:
    name, path = body_file(tmp_path, case)
    # A REST API's URL carries its stage; HTTP APIs on the $default stage have none.
    stage = "/prod" if shape == "apigw-v1" else ""
    url = f"https://r1.execute-api.eu-west-1.amazonaws.com{stage}/webhooks/{name}?tenant=acme"
    argv = ["sign", name, str(path), "--providers", str(SAMPLE), "--format", shape]
    capsys.readouterr()
    assert main([*argv, "--url", url]) == 0
    event = json.loads(capsys.readouterr().out)
    reply = harness.invoke(event)
    assert reply.status == STATUS[case], reply
    assert stored(conn) == [(name, TYPES[case])]
    # One changed body byte: 401.
    raw = base64.b64decode(event["body"]) if event["isBase64Encoded"] else event["body"].encode()
    changed = raw.replace(b"1", b"2", 1)
    assert changed != raw
    event["body"] = (
        base64.b64encode(changed).decode() if event["isBase64Encoded"] else changed.decode()
    )
    assert harness.invoke(event).status == 401
