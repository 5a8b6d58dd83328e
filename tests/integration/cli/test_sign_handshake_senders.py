"""`webhook-inbox sign` for Mailgun, Linear, Zoom, Twitch and GitLab: what it prints matches each
provider's documented recipe (plain hmac here), and the signed event is accepted by the real
ingest handler."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.cli.test_sign_send import SECRETS, _sign
from tests.support import FakeLambdaContext

# provider -> (an event it sends, its type, the status a new event gets: 200 where the sender
# counts only 200 as success)
ACCEPTING: dict[str, tuple[dict[str, Any], str, int]] = {
    "mailgun": ({"id": "ev2", "event": "delivered"}, "delivered", 200),
    "linear": ({"action": "create", "type": "Issue", "data": {"id": "i1"}}, "Issue.create", 200),
    "zoom": ({"event": "meeting.ended", "payload": {"object": {"id": "1"}}}, "meeting.ended", 200),
    "twitch": (
        {"subscription": {"type": "channel.follow", "version": "2"}, "event": {"user_id": "1"}},
        "channel.follow",
        202,
    ),
    "gitlab": ({"object_kind": "push", "ref": "refs/heads/main"}, "Push Hook", 202),
    "gitlab-signed": ({"object_kind": "push", "ref": "refs/heads/main"}, "Push Hook", 202),
}


def _mac(provider: str, content: bytes) -> str:
    return hmac.new(SECRETS[provider].encode(), content, hashlib.sha256).hexdigest()


def test_mailgun_sign_wraps_the_file_as_event_data_and_signs_timestamp_and_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event_data = tmp_path / "event-data.json"
    event_data.write_bytes(b'{"id":"ev1","event":"opened"}')
    printed = _sign(capsys, "mailgun", str(event_data), "--format", "json", "--event-id", "tok1")
    document = json.loads(printed["body"])
    signature = document["signature"]
    assert signature["token"] == "tok1"
    assert signature["signature"] == _mac("mailgun", f"{signature['timestamp']}tok1".encode())
    assert document["event-data"] == {"id": "ev1", "event": "opened"}


def test_linear_sign_stamps_webhook_timestamp_and_signs_the_stamped_body(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body_file = tmp_path / "issue.json"
    body_file.write_bytes(b'{"action":"create","type":"Issue","data":{"id":"i1"}}')
    printed = _sign(
        capsys, "linear", str(body_file), "--format", "json", "--timestamp", "1700000000"
    )
    assert json.loads(printed["body"])["webhookTimestamp"] == 1_700_000_000_000
    assert printed["headers"]["Linear-Signature"] == _mac("linear", printed["body"].encode())


def test_zoom_sign_is_v0_hex_hmac_of_v0_timestamp_body(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body_file = tmp_path / "meeting.json"
    body_file.write_bytes(b'{"event":"meeting.ended"}')
    headers = _sign(capsys, "zoom", str(body_file), "--format", "json", "--timestamp", "42")[
        "headers"
    ]
    assert headers["x-zm-request-timestamp"] == "42"
    assert headers["x-zm-signature"] == "v0=" + _mac("zoom", b'v0:42:{"event":"meeting.ended"}')


def test_twitch_sign_is_sha256_hex_hmac_of_id_timestamp_body(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = b'{"subscription":{"type":"channel.follow"},"event":{}}'
    body_file = tmp_path / "follow.json"
    body_file.write_bytes(body)
    argv = ("--format", "json", "--event-id", "m-1", "--timestamp", "1613778420")
    headers = _sign(capsys, "twitch", str(body_file), *argv)["headers"]
    timestamp = headers["Twitch-Eventsub-Message-Timestamp"]
    assert timestamp == "2021-02-19T23:47:00.000000000Z"
    signed = b"m-1" + timestamp.encode() + body
    assert headers["Twitch-Eventsub-Message-Signature"] == "sha256=" + _mac("twitch", signed)


def test_gitlab_sign_sends_the_token_and_the_event_id_as_idempotency_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body_file = tmp_path / "push.json"
    body_file.write_bytes(b'{"object_kind":"push"}')
    argv = ("--format", "json", "--event-id", "idem-1", "--type", "Push Hook")
    headers = _sign(capsys, "gitlab", str(body_file), *argv)["headers"]
    assert headers["X-Gitlab-Token"] == SECRETS["gitlab"]
    assert (headers["Idempotency-Key"], headers["X-Gitlab-Event"]) == ("idem-1", "Push Hook")


@pytest.mark.parametrize("provider", ACCEPTING)
def test_a_signed_api_gateway_event_is_accepted_by_the_ingest_handler(
    provider: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    ingest_env: tuple[Any, Any, str],
    conn: psycopg.Connection[Any],
) -> None:
    app, _, _ = ingest_env
    body, event_type, status = ACCEPTING[provider]
    body_file = tmp_path / "body.json"
    body_file.write_text(json.dumps(body))
    event = _sign(capsys, provider, str(body_file), "--format", "apigw-v2", "--type", event_type)
    reply = app.handler(event, FakeLambdaContext())
    assert reply["statusCode"] == status, reply
    (row,) = conn.execute("SELECT provider, event_type FROM webhook_events").fetchall()
    assert row == (provider, event_type)
