"""The operator function's handler with Function URL events: levels, the caller, bounds, errors.

Every refusal changes nothing (the tables and the queue are compared before and after).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.integration.cli.conftest import seed_event, seed_outbox, table_snapshot
from tests.integration.operations.conftest import ALICE, OperatorFunction
from webhook_inbox.operations import function_url

MALLORY = "arn:aws:iam::123456789012:user/mallory"


def _audit(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT action, operator, reason FROM operator_actions ORDER BY id"
    ).fetchall()


# --- read level ------------------------------------------------------------------------------


def test_read_level_answers_status_listings_and_one_event(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    row = seed_event(conn, "evt_1", status="dead_letter", attempts=8, error="boom")
    seed_outbox(conn, "k1", status="dead", attempts=10)

    status = operator.call("read", {"command": "status"}).result
    assert status["events"]["dead_letter"]["count"] == 1
    assert status["outbox"]["dead"] == 1
    listed = operator.call(
        "read", {"command": "events list", "filter": {"status": ["dead_letter"]}}
    )
    assert [e["id"] for e in listed.result["events"]] == [row]
    assert listed.result["events"][0]["received_at"].endswith("+00:00")  # ISO 8601 on the wire
    shown = operator.call("read", {"command": "events show", "provider": "stripe", "id": "evt_1"})
    assert shown.result["last_error"] == "boom"
    assert "payload" not in shown.result
    outbox = operator.call("read", {"command": "outbox list", "filter": {"status": ["dead"]}})
    assert [m["deduplication_key"] for m in outbox.result["messages"]] == ["k1"]
    assert shown.log["operator"] == ALICE
    assert shown.log["operator_level"] == "read"
    searched = operator.call("read", {"command": "events list", "filter": {"id": "evt_1"}})
    assert [e["id"] for e in searched.result["events"]] == [row]
    traffic = operator.call(
        "read",
        {"command": "traffic", "since": (datetime.now(UTC) - timedelta(days=1)).isoformat()},
    ).result
    assert traffic["providers"][0]["provider"] == "stripe"
    assert traffic["providers"][0]["accepted"] == 1
    assert [a["events"] for a in traffic["arrivals"]] == [1]


@pytest.mark.parametrize(
    "body",
    [
        {"command": "replay", "provider": "stripe", "ids": ["evt_1"], "reason": "r"},
        {"command": "replay", "filter": {"status": ["dead_letter"]}, "reason": "r",
         "confirmed": True},
        {"command": "outbox retry", "ids": [1], "reason": "r"},
        {"command": "events show", "provider": "stripe", "id": "evt_1", "payload": True},
        {"command": "pause", "provider": "stripe", "reason": "r"},
        {"command": "resume", "provider": "stripe"},
    ],
    ids=["replay", "filtered-replay", "outbox-retry", "payload", "pause", "resume"],
)  # fmt: skip
def test_read_level_refuses_every_act_command_and_payloads_and_changes_nothing(
    operator: OperatorFunction, conn: psycopg.Connection[Any], body: dict[str, Any]
) -> None:
    seed_event(conn, "evt_1", status="dead_letter", attempts=8)
    seed_outbox(conn, "k1", status="dead", attempts=10)
    before = table_snapshot(conn)

    reply = operator.call("read", body)

    assert reply.status == 403
    assert "the read level refuses" in reply.error
    assert "act level" in reply.error
    assert "payload" not in reply.body
    assert table_snapshot(conn) == before
    assert operator.queue.drain() == []


# --- act level and the caller ------------------------------------------------------------------


def test_act_level_replays_and_audits_the_iam_principal_not_the_name_in_the_body(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    row = seed_event(conn, "evt_dead", status="dead_letter", attempts=8, error="boom")
    body = {
        "command": "replay", "provider": "stripe", "ids": ["evt_dead"],
        "reason": "handler fixed", "operator": "mallory",
    }  # fmt: skip

    reply = operator.call("act", body, who=ALICE)

    (outcome,) = reply.result["outcomes"]
    assert (outcome["outcome"], outcome["enqueued"]) == ("replayed", True)
    assert _audit(conn) == [("replay", ALICE, "handler fixed")]
    status = conn.execute("SELECT status, attempts FROM webhook_events WHERE id = %s", (row,))
    assert status.fetchone() == ("received", 0)
    assert operator.queue.drain() == [{"id": row}]
    assert reply.log["operator"] == ALICE
    assert reply.log["outcomes"] == {"replayed": 1}


def test_the_caller_is_the_caller_id_when_aws_gives_no_user_arn(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_1", status="dead_letter", attempts=8)
    event = operator.event(
        {"command": "replay", "provider": "stripe", "ids": ["evt_1"], "reason": "r"}
    )
    event["requestContext"]["authorizer"]["iam"]["userArn"] = None
    event["requestContext"]["authorizer"]["iam"]["callerId"] = "AROAEXAMPLE:ops-session"
    assert operator.call("act", event=event).status == 200
    assert _audit(conn) == [("replay", "AROAEXAMPLE:ops-session", "r")]


def test_an_event_without_the_caller_aws_authenticated_is_refused(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    """A direct lambda:Invoke carries whatever requestContext its caller wrote, or none: the
    policies allow Invoke only through the URL, and the function refuses an event without one."""
    seed_event(conn, "evt_1", status="dead_letter", attempts=8)
    before = table_snapshot(conn)
    body = {"command": "replay", "provider": "stripe", "ids": ["evt_1"], "reason": "r",
            "operator": MALLORY}  # fmt: skip
    reply = operator.call("act", body, who=None)
    assert reply.status == 403
    assert "no caller AWS authenticated" in reply.error
    assert table_snapshot(conn) == before


def test_a_payload_is_returned_at_the_act_level_and_its_read_is_logged_with_the_caller(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    row = seed_event(conn, "evt_1")
    reply = operator.call(
        "act", {"command": "events show", "provider": "stripe", "id": "evt_1", "payload": True}
    )
    assert reply.result["payload"] == {"id": "evt_1", "type": "customer.created"}
    assert reply.log == {
        **reply.log,
        "operator_level": "act",
        "operator": ALICE,
        "command": "events show",
        "row_id": row,
        "payload_read": True,
        "status": 200,
    }
    assert "evt_1" not in json.dumps(reply.log)  # the payload never reaches the log


def test_a_filtered_replay_acts_only_once_confirmed_and_only_on_the_rows_shown(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    shown = [seed_event(conn, f"evt_{i}", status="dead_letter", attempts=8) for i in range(3)]
    where = {"status": ["dead_letter"]}
    unconfirmed = operator.call("act", {"command": "replay", "filter": where, "reason": "r"})
    assert unconfirmed.status == 400
    assert "confirmed" in unconfirmed.error
    preview = operator.call(
        "act", {"command": "replay", "filter": where, "reason": "r", "dry_run": True}
    )
    assert [r["id"] for r in preview.result["before"]] == shown
    assert {o["outcome"] for o in preview.result["outcomes"]} == {"would_replay"}
    late = seed_event(conn, "evt_late", status="dead_letter", attempts=8)  # after the preview

    reply = operator.call(
        "act",
        {"command": "replay", "filter": where, "reason": "r", "confirmed": True,
         "only_rows": shown[:2]},
    )  # fmt: skip

    assert [o["id"] for o in reply.result["outcomes"]] == shown[:2]
    statuses = dict(conn.execute("SELECT id, status FROM webhook_events").fetchall())
    assert [statuses[i] for i in (*shown, late)] == [
        "received",
        "received",
        "dead_letter",
        "dead_letter",
    ]


def test_outbox_retry_at_the_act_level(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    dead = seed_outbox(conn, "k_dead", status="dead", attempts=10)
    reply = operator.call("act", {"command": "outbox retry", "ids": [dead], "reason": "bus back"})
    assert [o["outcome"] for o in reply.result["outcomes"]] == ["retried"]
    assert _audit(conn) == [("outbox_retry", ALICE, "bus back")]


# --- bounds ------------------------------------------------------------------------------------


def test_pages_are_capped_at_500_rows(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    assert function_url.MAX_ROWS == 500
    too_many = operator.call("read", {"command": "events list", "limit": 501})
    assert too_many.status == 400
    assert "limit must be at most 500" in too_many.error
    assert operator.call("read", {"command": "outbox list", "limit": 500}).status == 200
    replay = {"command": "replay", "filter": {"status": ["failed"]}, "max": 501, "reason": "r",
              "dry_run": True}  # fmt: skip
    assert operator.call("act", replay).status == 400


def test_a_listing_too_large_for_a_lambda_answer_is_cut_with_a_cursor_that_continues_it(
    operator: OperatorFunction, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [
        seed_event(conn, f"evt_{i}", status="failed", attempts=1, error="x" * 900)
        for i in range(40)
    ]
    monkeypatch.setattr(function_url, "ANSWER_LIMIT_BYTES", 20_000)
    seen: list[int] = []
    cursor: dict[str, int] = {}
    for _ in range(40):  # bounded: each page holds at least one row
        reply = operator.call("read", {"command": "events list", "limit": 40, **cursor})
        assert (
            function_url.response_size({"statusCode": 200, "body": json.dumps(reply.body)})
            < 20_000 * 1.1
        )
        page = reply.result
        seen += [e["id"] for e in page["events"]]
        if page["next_cursor"] is None:
            break
        cursor = {"cursor": page["next_cursor"]}
    assert seen == sorted(ids, reverse=True)
    first = operator.call("read", {"command": "events list", "limit": 40})
    assert len(first.result["events"]) < 40
    assert any("--cursor" in m for m in first.body["messages"])


def test_a_payload_too_large_for_a_lambda_answer_is_a_413(
    operator: OperatorFunction, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_event(conn, "evt_big")
    conn.execute(
        "UPDATE webhook_events SET payload = jsonb_build_object('blob', repeat('é', 5000))"
    )
    monkeypatch.setattr(function_url, "ANSWER_LIMIT_BYTES", 20_000)
    body = {"command": "events show", "provider": "stripe", "id": "evt_big", "payload": True}
    reply = operator.call("act", body)
    assert reply.status == 413
    assert "over the operator function's 20,000" in reply.error


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "the body is not a JSON object"),
        (b"[1, 2]", "the request must be a JSON object"),
        (b'{"command": "drop table"}', "unknown command 'drop table'"),
        (b'{"command": "status", "verbose": true}', "unknown key(s) verbose"),
        (b'{"command": "events list", "limit": "50"}', "limit must be a whole number"),
        (b'{"command": "events list", "filter": {"status": ["gone"]}}', "not 'gone'"),
        (b'{"command": "events list", "filter": {"since": "yesterday"}}', "since must be an ISO"),
        (b'{"command": "events list", "filter": {"provider": "stripe", "typo": 1}}', "typo"),
        (b'{"command": "events show", "provider": "stripe"}', "id must be a non-empty string"),
        (b'{"command": "replay", "provider": "stripe", "ids": ["e"], "reason": " "}',
         "reason: cannot be empty"),
        (b'{"command": "replay", "provider": "stripe", "ids": ["e"], "filter": {"status": '
         b'["failed"]}, "reason": "r"}', "not both"),
        (b'{"command": "replay", "provider": "stripe", "reason": "r"}', "provider and ids"),
        (b'{"command": "replay", "provider": "stripe", "ids": ["e"], "reason": "r", '
         b'"dry_run": "yes"}', "dry_run must be true or false"),
        (b'{"command": "outbox retry", "ids": [1], "all_dead": true, "reason": "r"}',
         "message ids, or all_dead"),
        (b'{"command": "outbox retry", "ids": [0], "reason": "r"}', "positive whole numbers"),
        (b'{"command": "outbox list", "filter": {"event": "12"}}', "event must be a whole number"),
        (b'{"command": "traffic"}', "since is required"),
        (b'{"command": "traffic", "since": "2026-01-02T00:00", "until": "2026-01-01T00:00"}',
         "until must be after since"),
        (b'{"command": "traffic", "since": "2026-01-01T00:00", "until": "2026-03-01T00:00", '
         b'"bucket_seconds": 60}', "at most 1000 buckets"),
        (b'{"command": "traffic", "since": "2026-01-01T00:00", "bucket_seconds": 30}',
         "bucket_seconds must be a whole number of at least 60"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_that_says_what_is_wrong_and_changes_nothing(
    operator: OperatorFunction, conn: psycopg.Connection[Any], raw: bytes, message: str
) -> None:
    seed_event(conn, "e", status="dead_letter", attempts=8)
    seed_outbox(conn, "k1", status="dead", attempts=10)
    before = table_snapshot(conn)
    reply = operator.call("act", raw=raw)
    assert reply.status == 400, reply.body
    assert message in reply.error
    assert table_snapshot(conn) == before
    assert operator.queue.drain() == []


def test_a_base64_body_is_read_as_a_function_url_sends_a_binary_one(
    operator: OperatorFunction,
) -> None:
    event = operator.event({"command": "status"})
    event["body"] = base64.b64encode(b'{"command": "status"}').decode()
    event["isBase64Encoded"] = True
    assert operator.call("read", event=event).status == 200


def test_an_unknown_event_is_a_404_and_a_get_a_405(operator: OperatorFunction) -> None:
    missing = operator.call("read", {"command": "events show", "provider": "stripe", "id": "x"})
    assert missing.status == 404
    assert "no event 'x' from provider 'stripe'" in missing.error
    event = operator.event({"command": "status"})
    event["requestContext"]["http"]["method"] = "GET"
    assert operator.call("read", event=event).status == 405


def test_a_database_that_cannot_be_reached_is_a_503_and_the_next_call_reconnects(
    operator: OperatorFunction, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook_inbox.store import db

    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1")
    db.reset_for_tests()
    down = operator.call("read", {"command": "status"})
    assert down.status == 503
    assert "the database did not answer" in down.error
    monkeypatch.setenv("DATABASE_URL", database_url)
    db.reset_for_tests()
    assert operator.call("read", {"command": "status"}).status == 200


def test_a_database_conflict_is_a_503_that_says_to_run_it_again(
    operator: OperatorFunction, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook_inbox.errors import StoreConflict
    from webhook_inbox.operations import commands

    def deadlocked(*_args: Any, **_kwargs: Any) -> Any:
        raise StoreConflict("deadlock detected")

    monkeypatch.setattr(commands, "run", deadlocked)
    reply = operator.call("read", {"command": "status"})
    assert reply.status == 503
    assert "conflict (deadlock detected): run it again" in reply.error


def test_an_act_principal_pauses_and_resumes_and_is_recorded_as_who(
    operator: OperatorFunction, conn: psycopg.Connection[Any]
) -> None:
    body = {"command": "pause", "provider": "stripe", "type": "invoice.*", "reason": "incident"}
    paused = operator.call("act", {**body, "operator": "mallory"}, who=ALICE)
    assert (paused.result["provider"], paused.result["type"]) == ("stripe", "invoice.*")
    listed = operator.call("read", {"command": "paused"})
    [pause] = listed.result["pauses"]
    assert (pause["paused_by"], pause["reason"], pause["held"]) == (ALICE, "incident", 0)
    assert operator.call("read", {"command": "status"}).result["pauses"] == listed.result["pauses"]
    again = operator.call("act", body, who=ALICE)
    assert (again.status, "paused already" in again.error) == (409, True)

    resumed = operator.call("act", {"command": "resume", "provider": "stripe", "type": "invoice.*"})
    assert resumed.result["released"] == 0
    assert operator.call("read", {"command": "paused"}).result["pauses"] == []
    by = conn.execute("SELECT resumed_by FROM handler_pauses").fetchone()
    assert by == (ALICE,)
    gone = operator.call("act", {"command": "resume", "provider": "stripe", "type": "invoice.*"})
    assert (gone.status, "is not paused" in gone.error) == (404, True)
