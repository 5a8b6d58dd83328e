"""Read commands (status, events, outbox list) and `outbox retry`, in-process."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.integration.cli.conftest import seed_event, seed_outbox, table_snapshot
from webhook_inbox.store import partitions
from webhook_inbox.store.queries import query
from webhook_inbox_tools.cli.app import build_parser


def test_status_json_counts_every_status(cli: Any, conn: psycopg.Connection[Any]) -> None:
    seed_event(conn, "a", status="dead_letter", attempts=8)
    seed_event(conn, "b", status="processing", attempts=1)
    seed_event(conn, "c", status="processed", attempts=1)
    seed_outbox(conn, "k1", status="dead", attempts=10)
    seed_outbox(conn, "k2")

    result = cli("status", "--json")

    assert result.code == 0
    doc = result.json()
    assert {k: v["count"] for k, v in doc["events"].items()} == {
        "received": 0, "processing": 1, "processed": 1, "failed": 0, "dead_letter": 1, "ignored": 0,
    }  # fmt: skip
    assert doc["live_leases"] == 1
    assert doc["oldest_unfinished_received_at"] is not None
    assert doc["outbox"]["pending"] == 1
    assert doc["outbox"]["dead"] == 1


def test_status_table_is_plain_text_when_not_a_terminal(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "a", status="dead_letter", attempts=8)
    result = cli("status")
    assert result.code == 0
    assert "dead_letter  1" in result.out
    assert "\033[" not in result.out


def test_events_list_pages_with_a_keyset_cursor(cli: Any, conn: psycopg.Connection[Any]) -> None:
    ids = [seed_event(conn, f"evt_{i}") for i in range(5)]
    seen: list[int] = []
    cursor: list[str] = []
    for _ in range(5):  # bounded: 5 rows at 2 a page is 3 pages
        page = cli("events", "list", "--limit", "2", "--json", *cursor).json()
        seen.extend(e["id"] for e in page["events"])
        if page["next_cursor"] is None:
            break
        cursor = ["--cursor", str(page["next_cursor"])]
    assert seen == sorted(ids, reverse=True)


def test_events_list_filters(cli: Any, conn: psycopg.Connection[Any]) -> None:
    seed_event(conn, "s1", status="failed", attempts=1)
    seed_event(conn, "s2", status="processed", attempts=1, event_type="invoice.paid")
    seed_event(conn, "g1", provider="github", event_type="push", status="failed", attempts=1)
    conn.execute("UPDATE webhook_events SET received_at = now() - interval '3 days'"
                 " WHERE event_id = 's1'")  # fmt: skip

    def ids(*argv: str) -> list[str]:
        result = cli("events", "list", "--json", *argv)
        assert result.code == 0, result.err
        return sorted(e["event_id"] for e in result.json()["events"])

    assert ids("--status", "failed") == ["g1", "s1"]
    assert ids("--provider", "stripe") == ["s1", "s2"]
    assert ids("--type", "push") == ["g1"]
    assert ids("--since", "1d") == ["g1", "s2"]
    assert ids("--until", "2d") == ["s1"]
    assert ids("--status", "failed", "--status", "processed", "--provider", "stripe") == [
        "s1", "s2",
    ]  # fmt: skip


def test_events_show_hides_the_payload_unless_asked(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_secret", status="failed", attempts=1, error="boom")
    plain = cli("events", "show", "stripe", "evt_secret", "--json").json()
    assert "payload" not in plain
    assert plain["status"] == "failed"
    assert plain["last_error"] == "boom"
    with_payload = cli("events", "show", "stripe", "evt_secret", "--json", "--payload").json()
    assert with_payload["payload"] == {"id": "evt_secret", "type": "customer.created"}
    human = cli("events", "show", "stripe", "evt_secret")
    assert "evt_secret" in human.out
    assert "customer.created" in human.out  # the type, not the payload
    assert '"type"' not in human.out


def test_events_show_lists_the_audit_trail(cli: Any, conn: psycopg.Connection[Any]) -> None:
    seed_event(conn, "evt_1", status="dead_letter", attempts=8)
    assert cli("replay", "stripe", "evt_1", "--reason", "because").code == 0
    shown = cli("events", "show", "stripe", "evt_1", "--json").json()
    assert [
        (a["action"], a["reason"], a["previous_attempts"]) for a in shown["operator_actions"]
    ] == [("replay", "because", 8)]


def test_events_show_unknown_event_fails_with_a_message(cli: Any) -> None:
    result = cli("events", "show", "stripe", "evt_nope")
    assert result.code == 1
    assert "no event 'evt_nope'" in result.err


def _give_delivery_id(conn: psycopg.Connection[Any], row_id: int, delivery_id: str) -> None:
    conn.execute("UPDATE webhook_events SET delivery_id = %s WHERE id = %s", (delivery_id, row_id))


def test_events_are_found_by_the_delivery_id_the_provider_shows(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    # GitHub's row is keyed by a digest of type and body; the operator holds X-GitHub-Delivery.
    key = "9f2c" * 16
    row = seed_event(conn, key, provider="github", event_type="push", status="processed")
    _give_delivery_id(conn, row, "72d3162e-cc78-11e3-81ab-4c9367dc0958")

    listed = cli("events", "list", "--provider", "github", "--json").json()["events"]
    assert [e["delivery_id"] for e in listed] == ["72d3162e-cc78-11e3-81ab-4c9367dc0958"]
    table = cli("events", "list", "--provider", "github")
    assert "DELIVERY" in table.out
    assert "72d3162e-cc78-11e3-81ab-4c9367dc0958" in table.out

    shown = cli("events", "show", "github", "72d3162e-cc78-11e3-81ab-4c9367dc0958", "--json")
    assert shown.code == 0, shown.err
    assert shown.json()["event_id"] == key
    assert "found by delivery id" in shown.err
    # The event id still works, and says nothing about delivery ids.
    by_key = cli("events", "show", "github", key, "--json")
    assert by_key.json()["id"] == row
    assert by_key.err == ""


def test_a_delivery_id_naming_two_events_lists_both(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    # A captured delivery replayed under another type header is a second event (issue 12).
    for key, event_type in (("a" * 64, "push"), ("b" * 64, "issues")):
        row = seed_event(conn, key, provider="github", event_type=event_type)
        _give_delivery_id(conn, row, "d-1")
    result = cli("events", "show", "github", "d-1")
    assert result.code == 1
    assert "names 2 events" in result.err
    assert f"events show github {'a' * 64}" in result.err
    assert f"events show github {'b' * 64}" in result.err


def test_the_delivery_id_lookup_reads_its_index(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO webhook_events (provider, event_id, delivery_id, event_type, body_sha256,"
        " payload) SELECT 'github', md5(g::text), CASE WHEN g % 2 = 0 THEN 'd-' || g END, 'push',"
        " sha256(g::text::bytea), '{}' FROM generate_series(1, 20000) AS g"
    )
    conn.execute("ANALYZE webhook_events")
    statement = query(
        "operator_actions", "event_ids_by_delivery_id", package="webhook_inbox.operations"
    ).as_string(conn)
    params = {"provider": "github", "delivery_id": "d-42", "limit": 10}
    plan = "\n".join(
        r[0]
        for r in conn.execute("EXPLAIN " + statement, params).fetchall()  # type: ignore[operator]
    )
    # The inbox is partitioned by day: each partition's copy of the index (named after the
    # partition), and no scan of a partition that holds rows.
    copies = {
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'webhook_events_delivery_id_idx'::regclass"
        ).fetchall()
    }
    assert any(re.search(rf"\b{name}\b", plan) for name in copies), plan
    for table in re.findall(r"Seq Scan on (\w+)", plan):
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), plan  # noqa: S608


def test_outbox_list_and_retry_of_a_dead_message(cli: Any, conn: psycopg.Connection[Any]) -> None:
    dead = seed_outbox(conn, "k_dead", status="dead", attempts=10)
    seed_outbox(conn, "k_ok", status="published", attempts=1)

    listed = cli("outbox", "list", "--status", "dead", "--json").json()
    assert [m["id"] for m in listed["messages"]] == [dead]

    result = cli("outbox", "retry", str(dead), "--reason", "bus is back", "--operator", "bob")

    assert result.code == 0, result.err
    row = conn.execute(
        "SELECT status, attempts, last_error, available_at <= now() FROM outbox_messages"
        " WHERE id = %s",
        (dead,),
    ).fetchone()
    assert row == ("pending", 0, None, True)
    audit = conn.execute(
        "SELECT action, operator, reason, outbox_id, previous_status, previous_attempts,"
        " previous_last_error FROM operator_actions"
    ).fetchall()
    assert audit == [("outbox_retry", "bob", "bus is back", dead, "dead", 10, "bus unavailable")]


def test_outbox_list_and_retry_on_every_partition_of_the_partitioned_outbox(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    """The outbox is partitioned by day (the test database is, as the sweeper switches a
    deployed one): a dead message of the old table's partition (stored before the switch), one
    of an old day's partition and one of today's are listed newest first and retried alike."""
    day = datetime.now(UTC).date() - timedelta(days=40)
    partitions.create_ahead(conn, days=0, today=day, table=partitions.OUTBOX)
    old_day = partitions.day_partition(day, partitions.OUTBOX)
    legacy, in_old_day = 42, old_day.low + 1
    for message_id, key in ((legacy, "k_legacy"), (in_old_day, "k_old_day")):
        conn.execute(
            "INSERT INTO outbox_messages (id, topic, deduplication_key, payload, status,"
            " attempts, last_error) VALUES (%s, 't', %s, '{}', 'dead', 10, 'bus unavailable')",
            (message_id, key),
        )
    today = seed_outbox(conn, "k_today", status="dead", attempts=10)
    assert partitions.is_partitioned(conn, partitions.OUTBOX)

    listed = cli("outbox", "list", "--status", "dead", "--json").json()
    assert [m["id"] for m in listed["messages"]] == [today, in_old_day, legacy]

    for message_id in (legacy, in_old_day, today):
        result = cli("outbox", "retry", str(message_id), "--reason", "bus is back")
        assert result.code == 0, result.err
    statuses = conn.execute("SELECT status, count(*) FROM outbox_messages GROUP BY 1").fetchall()
    assert statuses == [("pending", 3)]
    audit = conn.execute("SELECT outbox_id FROM operator_actions ORDER BY outbox_id").fetchall()
    assert audit == [(legacy,), (in_old_day,), (today,)]


def test_outbox_retry_refuses_messages_that_are_not_dead(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    published = seed_outbox(conn, "k_ok", status="published", attempts=1)
    before = table_snapshot(conn)
    result = cli("outbox", "retry", str(published), "999", "--reason", "r")
    assert result.code == 1
    assert "only dead messages" in result.out
    assert "not_found" in result.out
    assert table_snapshot(conn) == before


def test_outbox_retry_all_dead_asks_first(cli: Any, conn: psycopg.Connection[Any]) -> None:
    seed_outbox(conn, "k1", status="dead", attempts=10)
    seed_outbox(conn, "k2", status="dead", attempts=10)
    before = table_snapshot(conn)
    assert cli("outbox", "retry", "--all-dead", "--reason", "r", stdin="no\n").code == 1
    assert table_snapshot(conn) == before
    assert cli("outbox", "retry", "--all-dead", "--reason", "r", "--dry-run").code == 0
    assert table_snapshot(conn) == before
    assert cli("outbox", "retry", "--all-dead", "--reason", "r", stdin="y\n").code == 0
    pending = conn.execute("SELECT count(*) FROM outbox_messages WHERE status = 'pending'")
    assert pending.fetchone() == (2,)


def _commands(parser: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for action in parser._actions:  # argparse exposes subcommands only through _actions
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                found.extend(_commands(sub, (*prefix, name)))
    return found


@pytest.mark.parametrize("command", _commands(build_parser()), ids=" ".join)
def test_every_command_has_help(command: tuple[str, ...], capsys: Any) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--help"])
    assert exited.value.code == 0
    assert "usage: webhook-inbox" in capsys.readouterr().out


def test_events_list_finds_an_event_by_its_id_or_its_delivery_id(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_a")
    seed_event(conn, "sha256:abc", provider="github", event_type="push")
    seed_event(conn, "sha256:def", provider="github", event_type="push")
    conn.execute("UPDATE webhook_events SET delivery_id = 'dlv-1' WHERE event_id = 'sha256:abc'")

    def ids(*argv: str) -> list[str]:
        result = cli("events", "list", "--json", *argv)
        assert result.code == 0, result.err
        return [e["event_id"] for e in result.json()["events"]]

    assert ids("--id", "evt_a") == ["evt_a"]
    assert ids("--id", "dlv-1") == ["sha256:abc"]
    assert ids("--id", "dlv-1", "--provider", "github") == ["sha256:abc"]
    assert ids("--id", "dlv-1", "--provider", "stripe") == []
    assert ids("--id", "nothing") == []


def test_outbox_list_shows_the_messages_one_event_emitted(
    cli: Any, conn: psycopg.Connection[Any]
) -> None:
    source = seed_event(conn, "evt_src", status="processed")
    mine = seed_outbox(conn, "k-mine")
    seed_outbox(conn, "k-other")
    conn.execute("UPDATE outbox_messages SET source_event_id = %s WHERE id = %s", (source, mine))

    result = cli("outbox", "list", "--event", str(source), "--json")
    assert result.code == 0, result.err
    assert [m["id"] for m in result.json()["messages"]] == [mine]
