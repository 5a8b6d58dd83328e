"""`webhook-inbox … --stack S` end to end: the stack's outputs from (moto's) CloudFormation, a
SigV4-signed POST to a loopback stand-in of its Function URLs that checks the signature and the
principal's policy as AWS would, the real operator function behind it, the same formatter.

Principals: a reader (OperatorReadPolicy) and an on-call role (OperatorActPolicy).
"""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws

from tests.function_url_standin import Principal, StandIn, serving
from tests.integration.cli.conftest import Queue, seed_event, seed_outbox, table_snapshot
from tests.support import load_function
from webhook_inbox import aws, observability
from webhook_inbox.operations import commands
from webhook_inbox.store import db
from webhook_inbox_tools.cli import operator_remote

READER = Principal("arn:aws:iam::123456789012:user/reader", "reader-secret", frozenset({"read"}))
ON_CALL = Principal(
    "arn:aws:sts::123456789012:assumed-role/oncall/alice",
    "oncall-secret",
    frozenset({"read", "act"}),
)
KEYS = {"AKIAREADER0000000001": READER, "AKIAONCALL0000000001": ON_CALL}


def _stack(cloudformation: Any, name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))


class Stack:
    def __init__(self, standin: StandIn, queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
        self.standin = standin
        self.queue = queue
        self.monkeypatch = monkeypatch

    def as_principal(self, key: str, secret: str | None = None) -> None:
        """The caller's credentials, as the default boto3 session finds them."""
        self.monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        self.monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret or KEYS[key].secret)


@pytest.fixture
def stack(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """Stack ``S`` with both URLs, stack ``old`` from before the operator functions, the
    stand-in serving the real function on this test's database, a moto queue."""
    for name in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("OPERATOR_LEVEL", "read")  # restored after; the stand-in sets it per call
    aws.reset()
    handler = observability.lean_logger().registered_handler
    assert isinstance(handler, logging.StreamHandler)
    # The function's lines, not the CLI's output (set, not setStream: that flushes the old
    # stream, which may be an earlier test's closed capture).
    previous, handler.stream = handler.stream, io.StringIO()
    standin = StandIn(load_function("operator"), dict(KEYS))
    with mock_aws(), serving(standin):
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="processing")["QueueUrl"]
        monkeypatch.setenv("PROCESSING_QUEUE_URL", url)
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        _stack(
            cloudformation,
            "S",
            {
                "OperatorReadUrl": standin.read_url,
                "OperatorActUrl": standin.act_url,
                "OperatorReadPolicyArn": "arn:aws:iam::123456789012:policy/S-OperatorReadPolicy",
                "OperatorActPolicyArn": "arn:aws:iam::123456789012:policy/S-OperatorActPolicy",
            },
        )
        _stack(cloudformation, "old", {"WebhookUrl": "https://example.invalid/webhooks/{provider}"})
        yield Stack(standin, Queue(url, sqs), monkeypatch)
    handler.stream = previous
    aws.reset()
    db.reset_for_tests()


def _audit(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT action, operator, reason FROM operator_actions ORDER BY id"
    ).fetchall()


# --- a read-only principal -------------------------------------------------------------------


def test_a_reader_runs_status_and_events_and_sees_what_the_cli_on_the_database_sees(
    cli: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_1", status="dead_letter", attempts=8, error="boom")
    row = seed_event(conn, "evt_2", status="failed", attempts=2, error="later")
    seed_outbox(conn, "k1", status="dead", attempts=10)
    stack.as_principal("AKIAREADER0000000001")

    for argv in (
        ["status", "--json"],
        ["events", "list", "--status", "dead_letter", "--status", "failed", "--json"],
        ["events", "list", "--limit", "1", "--json"],
        ["events", "show", "stripe", "evt_2", "--json"],
        ["outbox", "list", "--json"],
    ):
        remote = cli(*argv, "--stack", "S")
        local = cli(*argv)  # DATABASE_URL: the same database, directly
        assert remote.code == local.code == 0, remote.err
        assert remote.out == local.out, argv  # the same document

    shown = cli("events", "show", "stripe", "evt_2", "--stack", "S")
    assert shown.out == cli("events", "show", "stripe", "evt_2").out  # the same formatter
    assert shown.out.startswith(f"id                 {row}\n")
    listed = cli("events", "list", "--limit", "1", "--stack", "S")
    assert "more rows: repeat with --cursor" in listed.err
    assert {level for level, _ in stack.standin.calls} == {"read"}
    assert all(status == 200 for _, status in stack.standin.calls)


def test_a_reader_may_not_replay_and_is_told_which_policy_to_attach(
    cli: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_1", status="dead_letter", attempts=8)
    stack.as_principal("AKIAREADER0000000001")
    before = table_snapshot(conn)

    result = cli("replay", "stripe", "evt_1", "--reason", "r", "--stack", "S")

    assert result.code == 1
    assert result.err.startswith("error: stack S: AWS refused the call (403)")
    assert "attach the stack's OperatorActPolicy (output OperatorActPolicyArn)" in result.err
    assert stack.standin.calls == [("act", 403)]
    assert table_snapshot(conn) == before
    assert stack.queue.drain() == []
    payload = cli("events", "show", "stripe", "evt_1", "--payload", "--stack", "S")
    assert payload.code == 1
    assert "OperatorActPolicy" in payload.err  # a payload is the act function's


# --- an act principal ------------------------------------------------------------------------


def test_an_on_call_principal_replays_and_the_audit_records_its_arn(
    cli: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    row = seed_event(conn, "evt_dead", status="dead_letter", attempts=8, error="boom")
    stack.as_principal("AKIAONCALL0000000001")

    result = cli("replay", "stripe", "evt_dead", "--reason", "handler fixed", "--stack", "S")

    assert result.code == 0, result.err
    assert "stripe/evt_dead  dead_letter  replayed  yes" in result.out
    assert _audit(conn) == [("replay", ON_CALL.arn, "handler fixed")]
    assert stack.queue.drain() == [{"id": row}]
    shown = cli("events", "show", "stripe", "evt_dead", "--json", "--stack", "S").json()
    assert [a["operator"] for a in shown["operator_actions"]] == [ON_CALL.arn]


def test_a_filtered_replay_is_shown_and_confirmed_on_this_side_and_only_that_set_replayed(
    cli: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    rows = [seed_event(conn, f"evt_{i}", status="dead_letter", attempts=8) for i in range(2)]
    stack.as_principal("AKIAONCALL0000000001")
    before = table_snapshot(conn)

    declined = cli(
        "replay", "--status", "dead_letter", "--reason", "r", "--stack", "S", stdin="n\n"
    )
    assert declined.code == 1
    assert f"Replay these 2 event(s) as {ON_CALL.arn}?" in declined.err
    assert table_snapshot(conn) == before

    result = cli("replay", "--status", "dead_letter", "--reason", "r", "--stack", "S", stdin="y\n")
    assert result.code == 0, result.err
    assert "2 event(s) selected, current state:" in result.out
    assert sorted(b["id"] for b in stack.queue.drain()) == rows
    assert _audit(conn) == [("replay", ON_CALL.arn, "r")] * 2


def test_outbox_retry_through_the_stack(
    cli: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    dead = seed_outbox(conn, "k_dead", status="dead", attempts=10)
    stack.as_principal("AKIAONCALL0000000001")
    result = cli("outbox", "retry", "--all-dead", "--reason", "bus back", "--yes", "--stack", "S")
    assert result.code == 0, result.err
    assert f"outbox #{dead}" in result.out
    assert _audit(conn) == [("outbox_retry", ON_CALL.arn, "bus back")]


# --- what goes wrong -------------------------------------------------------------------------


def test_a_signature_made_with_the_wrong_secret_is_refused_by_aws(
    cli: Any, stack: Stack, conn: psycopg.Connection[Any]
) -> None:
    stack.as_principal("AKIAONCALL0000000001", secret="not-the-secret")
    result = cli("status", "--stack", "S")
    assert result.code == 1
    assert "AWS refused the call (403)" in result.err
    assert "OperatorReadPolicy" in result.err
    assert stack.standin.calls == [("read", 403)]


def test_a_stack_without_the_outputs_or_no_stack_is_a_usage_error_naming_it(
    cli: Any, stack: Stack
) -> None:
    stack.as_principal("AKIAREADER0000000001")
    old = cli("status", "--stack", "old")
    assert old.code == 2
    assert old.err.startswith(
        "error: stack 'old' has no outputs OperatorReadUrl and OperatorActUrl"
    )
    assert "`sam deploy` this version with it true first" in old.err
    missing = cli("status", "--stack", "nope", "--region", "us-east-1")
    assert missing.code == 2
    assert "no stack 'nope' in us-east-1: check --stack and --region" in missing.err
    assert stack.standin.calls == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["replay", "stripe", "e", "--reason", "r", "--operator", "bob"],
         "--operator does not apply"),
        (["replay", "stripe", "e", "--reason", "r", "--queue-url", "http://q"],
         "--queue-url does not apply"),
        (["events", "list", "--limit", "501"], "--limit is at most 500 through stack S"),
        (["replay", "--status", "failed", "--max", "600", "--reason", "r"], "--max is at most 500"),
    ],
)  # fmt: skip
def test_options_that_do_not_apply_through_a_stack_are_usage_errors(
    cli: Any, stack: Stack, argv: list[str], said: str
) -> None:
    stack.as_principal("AKIAONCALL0000000001")
    result = cli(*argv, "--stack", "S")
    assert result.code == 2
    assert said in result.err
    assert stack.standin.calls == []


def test_stack_and_database_url_exclude_each_other_and_region_needs_a_stack(cli: Any) -> None:
    with pytest.raises(SystemExit) as exited:
        cli("status", "--stack", "S", "--database-url", "postgresql://x")
    assert exited.value.code == 2
    region = cli("status", "--region", "eu-west-1")
    assert region.code == 2
    assert "--region names the region of --stack" in region.err


def test_a_function_that_fails_is_a_502_naming_its_log_group(
    cli: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(commands, "run", broken)
    stack.as_principal("AKIAREADER0000000001")
    result = cli("status", "--stack", "S")
    assert result.code == 1
    assert "the operator function failed (502" in result.err
    assert "/aws/lambda/S/operator-read" in result.err


def test_a_function_that_does_not_answer_in_time_is_reported(
    cli: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operator_remote, "TIMEOUT_S", 0.5)
    stack.standin.hold = threading.Event()  # released when the stand-in stops
    stack.as_principal("AKIAONCALL0000000001")
    result = cli("status", "--stack", "S")
    assert result.code == 3
    assert "stack S: no answer from its operator function within 0 s" in result.err
    assert "look with `events list` before running it again" in result.err


def test_a_url_nothing_listens_on_is_unreachable(cli: Any, stack: Stack) -> None:
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    _stack(
        cloudformation,
        "gone",
        {
            "OperatorReadUrl": "http://127.0.0.1:9/read/",
            "OperatorActUrl": "http://127.0.0.1:9/act/",
        },
    )
    stack.as_principal("AKIAREADER0000000001")
    result = cli("status", "--stack", "gone")
    assert result.code == 3
    assert (
        "stack gone: cannot reach its operator function at http://127.0.0.1:9/read/" in result.err
    )


def test_a_database_the_function_cannot_reach_is_exit_3(
    cli: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1")
    db.reset_for_tests()
    stack.as_principal("AKIAREADER0000000001")
    result = cli("status", "--stack", "S")
    assert result.code == 3
    assert "stack S: the database did not answer" in result.err
    assert stack.standin.calls == [("read", 503)]
