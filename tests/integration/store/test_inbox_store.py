"""The data layer against a real PostgreSQL: races decided by the database, not by luck."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from webhook_inbox.errors import LeaseLost
from webhook_inbox.store import inbox, inbox_upkeep, outbox
from webhook_inbox.store.queries import query


def _claim(
    conn: psycopg.Connection[Any], event_id: str, provider: str = "stripe"
) -> inbox.ClaimResult:
    body = f'{{"id": "{event_id}"}}'.encode()
    return inbox.claim_event(
        conn,
        provider=provider,
        event_id=event_id,
        event_type="customer.created",
        body_sha256=hashlib.sha256(body).digest(),
        payload={"id": event_id},
    )


def _expire_lease(conn: psycopg.Connection[Any], row_id: int) -> None:
    conn.execute(
        "UPDATE webhook_events SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (row_id,),
    )


def test_claim_reports_new_then_duplicate_and_counts_deliveries(
    conn: psycopg.Connection[Any],
) -> None:
    first = _claim(conn, "evt_1")
    second = _claim(conn, "evt_1")
    assert first.is_new
    assert first.status == "received"
    assert not second.is_new
    assert second.id == first.id
    assert second.delivery_count == 2


def test_twenty_concurrent_claims_of_one_event_store_one_row(database_url: str) -> None:
    barrier = threading.Barrier(20)

    def deliver(_: int) -> inbox.ClaimResult:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait(timeout=30)
            return _claim(own, "evt_race")

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(deliver, range(20)))

    assert sum(r.is_new for r in results) == 1
    assert len({r.id for r in results}) == 1
    with psycopg.connect(database_url) as check:
        row = check.execute(
            "SELECT count(*), max(delivery_count) FROM webhook_events WHERE event_id = 'evt_race'"
        ).fetchone()
    assert row == (1, 20)


def test_same_event_id_under_different_providers_is_two_events(
    conn: psycopg.Connection[Any],
) -> None:
    assert _claim(conn, "evt_1", provider="stripe").is_new
    assert _claim(conn, "evt_1", provider="github").is_new


def test_two_connections_never_lease_the_same_row(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as setup:
        ids = [_claim(setup, f"evt_{i}").id for i in range(200)]
    barrier = threading.Barrier(2)

    def lease(owner: str) -> list[int]:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait(timeout=30)
            return [e.id for e in inbox.lease_events(own, ids, owner=owner, lease_seconds=60)]

    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(lease, ["worker-a", "worker-b"])
    assert set(a).isdisjoint(b)
    assert sorted(a + b) == sorted(ids)


def test_live_lease_blocks_and_expired_lease_is_reclaimable(conn: psycopg.Connection[Any]) -> None:
    row_id = _claim(conn, "evt_1").id
    [first] = inbox.lease_events(conn, [row_id], owner="dead-worker", lease_seconds=60)
    assert first.attempts == 1
    assert inbox.lease_events(conn, [row_id], owner="other", lease_seconds=60) == []

    _expire_lease(conn, row_id)
    [second] = inbox.lease_events(conn, [row_id], owner="other", lease_seconds=60)
    assert second.attempts == 2  # both attempts count


def test_a_lost_lease_refuses_the_old_owners_transition(conn: psycopg.Connection[Any]) -> None:
    row_id = _claim(conn, "evt_1").id
    inbox.lease_events(conn, [row_id], owner="slow", lease_seconds=60)
    _expire_lease(conn, row_id)
    inbox.lease_events(conn, [row_id], owner="fast", lease_seconds=60)
    with pytest.raises(LeaseLost):
        inbox.mark_processed(conn, row_id, owner="slow")
    inbox.mark_processed(conn, row_id, owner="fast")


def test_the_batched_mark_fails_whole_and_names_the_rows_whose_lease_was_lost(
    conn: psycopg.Connection[Any],
) -> None:
    """mark_batch_done marks nothing unless every row is still leased to its owner: the error
    (LeaseLost, the lost rows named) aborts the transaction it runs in, COMMIT included."""
    kept, lost, ignored_kept, ignored_lost = (_claim(conn, f"evt_{i}").id for i in range(4))
    inbox.lease_events(
        conn, [kept, lost, ignored_kept, ignored_lost], owner="slow", lease_seconds=60
    )
    for row_id in (lost, ignored_lost):
        _expire_lease(conn, row_id)
        inbox.lease_events(conn, [row_id], owner="fast", lease_seconds=60)

    with pytest.raises(LeaseLost) as raised, conn.transaction():
        inbox.send_batch_marks(
            conn,
            processed=[kept, lost],
            ignored=[ignored_kept, ignored_lost],
            owner="slow",
            disposition="none",
        )

    assert raised.value.rows == {lost, ignored_lost}
    statuses = conn.execute(
        "SELECT status, lease_owner FROM webhook_events WHERE id = ANY(%s) ORDER BY id",
        ([kept, lost, ignored_kept, ignored_lost],),
    ).fetchall()
    assert statuses == [("processing", "slow"), ("processing", "fast")] * 2

    marked = inbox.send_batch_marks(
        conn, processed=[kept], ignored=[ignored_kept], owner="slow", disposition="none"
    )
    assert list(inbox.batch_latencies(marked)) == [kept]
    assert inbox.statuses_of(conn, [kept, ignored_kept]) == {
        kept: ("processed", False),
        ignored_kept: ("ignored", False),
    }


def test_the_batched_mark_writes_each_kind_as_its_one_row_mark_does(
    conn: psycopg.Connection[Any],
) -> None:
    """One statement marks both kinds: a processed row loses its last error (mark_processed),
    an ignored row keeps it and gets its disposition (mark_ignored); only processed rows come
    back with a latency, and a batch of one kind answers empty arrays for the other."""
    processed, ignored, alone = (_claim(conn, f"evt_{i}").id for i in range(3))
    for row_id in (processed, ignored, alone):  # a failed attempt first: an error to keep or drop
        inbox.lease_events(conn, [row_id], owner="w", lease_seconds=60)
        inbox.mark_failed(
            conn, row_id, owner="w", delay_seconds=0, error_kind="retryable", error="earlier"
        )
    inbox.lease_events(conn, [processed, ignored, alone], owner="w", lease_seconds=60)

    marked = inbox.send_batch_marks(
        conn, processed=[processed], ignored=[ignored], owner="w", disposition="no handler"
    )
    assert list(inbox.batch_latencies(marked)) == [processed]
    only_ignored = inbox.send_batch_marks(
        conn, processed=[], ignored=[alone], owner="w", disposition="no handler"
    )
    assert inbox.batch_latencies(only_ignored) == {}

    rows = conn.execute(
        "SELECT status, error_kind, last_error, disposition, processed_at IS NOT NULL,"
        "       lease_owner, lease_expires_at FROM webhook_events WHERE id = ANY(%s) ORDER BY id",
        ([processed, ignored, alone],),
    ).fetchall()
    assert rows == [
        ("processed", None, None, None, True, None, None),
        ("ignored", "retryable", "earlier", "no handler", True, None, None),
        ("ignored", "retryable", "earlier", "no handler", True, None, None),
    ]


def test_take_leases_unpacks_the_lease_statement_column_by_column(
    conn: psycopg.Connection[Any],
) -> None:
    """take_leases reads the lease's answer by position: its columns are LEASE_COLUMNS."""
    row_id = _claim(conn, "evt_1").id
    cur = conn.execute(
        query("inbox", "lease_events"),
        {"ids": [row_id], "owner": "w", "lease_seconds": 60, "max_attempts": 8},
    )
    assert tuple(column.name for column in cur.description or ()) == inbox.LEASE_COLUMNS
    (leased,) = cur.fetchall()
    event = dict(zip(inbox.LEASE_COLUMNS, leased, strict=True))
    assert (event["id"], event["status"], event["event_id"]) == (row_id, "processing", "evt_1")


def test_failed_rows_wait_for_their_retry_time(conn: psycopg.Connection[Any]) -> None:
    row_id = _claim(conn, "evt_1").id
    inbox.lease_events(conn, [row_id], owner="w", lease_seconds=60)
    inbox.mark_failed(
        conn, row_id, owner="w", delay_seconds=3600, error_kind="retryable", error="x"
    )
    assert inbox.lease_events(conn, [row_id], owner="w", lease_seconds=60) == []
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300) == []

    conn.execute("UPDATE webhook_events SET available_at = now() WHERE id = %s", (row_id,))
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300) == [
        (row_id, "failed", False)
    ]
    assert [e.id for e in inbox.lease_events(conn, [row_id], owner="w", lease_seconds=60)] == [
        row_id
    ]


def test_terminal_rows_are_never_leased(conn: psycopg.Connection[Any]) -> None:
    ids = [_claim(conn, f"evt_{i}").id for i in range(3)]
    inbox.lease_events(conn, ids, owner="w", lease_seconds=60)
    inbox.mark_processed(conn, ids[0], owner="w")
    inbox.mark_dead_letter(conn, ids[1], owner="w", error_kind="permanent", error="bad")
    inbox.mark_ignored(conn, ids[2], owner="w", disposition="no handler for x")
    conn.execute("UPDATE webhook_events SET available_at = now() - interval '1 day'")
    assert inbox.lease_events(conn, ids, owner="w2", lease_seconds=60) == []


def test_never_enqueued_rows_are_claimed_once_until_stale(conn: psycopg.Connection[Any]) -> None:
    row_id = _claim(conn, "evt_1").id
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300) == [
        (row_id, "received", False)
    ]
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300) == []
    conn.execute(
        "UPDATE webhook_events SET enqueued_at = now() - interval '10 minutes',"
        " available_at = now() - interval '10 minutes' WHERE id = %s",
        (row_id,),
    )
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300) == [
        (row_id, "received", True)
    ]


def test_a_cleared_stamp_makes_the_row_due_at_once(conn: psycopg.Connection[Any]) -> None:
    row_id = _claim(conn, "evt_1").id
    inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300)
    inbox.clear_enqueued(conn, [row_id])
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300) == [
        (row_id, "received", False)
    ]


def test_a_claim_that_will_enqueue_is_stamped_and_not_due(conn: psycopg.Connection[Any]) -> None:
    body = b'{"id": "evt_1"}'
    inbox.claim_event(
        conn,
        provider="stripe",
        event_id="evt_1",
        event_type="x",
        body_sha256=hashlib.sha256(body).digest(),
        payload={"id": "evt_1"},
        enqueuing=True,
    )
    assert inbox_upkeep.claim_due_for_enqueue(conn, limit=10, stale_seconds=300) == []


def test_expired_leases_become_failed_or_dead_letter(conn: psycopg.Connection[Any]) -> None:
    retry_id = _claim(conn, "evt_retry").id
    spent_id = _claim(conn, "evt_spent").id
    inbox.lease_events(conn, [retry_id, spent_id], owner="w", lease_seconds=60)
    conn.execute("UPDATE webhook_events SET attempts = 5 WHERE id = %s", (spent_id,))
    _expire_lease(conn, retry_id)
    _expire_lease(conn, spent_id)

    outcome = dict(inbox_upkeep.expire_leases(conn, max_attempts=5, limit=100))

    assert outcome == {retry_id: "failed", spent_id: "dead_letter"}
    row = conn.execute(
        "SELECT error_kind, enqueued_at FROM webhook_events WHERE id = %s", (retry_id,)
    ).fetchone()
    assert row == ("lease_expired", None)


def test_take_leases_returns_leased_and_dead_lettered_rows_field_by_field(
    conn: psycopg.Connection[Any],
) -> None:
    """Each field of LeasedEvent is read by its column name; a takeover with its attempts spent
    comes back apart, dead-lettered, holding no lease."""
    fresh_id = _claim(conn, "evt_fresh").id
    spent_id = _claim(conn, "evt_spent").id
    inbox.lease_events(conn, [spent_id], owner="dead-worker", lease_seconds=60)
    conn.execute("UPDATE webhook_events SET attempts = 3 WHERE id = %s", (spent_id,))
    _expire_lease(conn, spent_id)

    leases = inbox.take_leases(
        conn, [fresh_id, spent_id], owner="w", lease_seconds=60, max_attempts=3
    )

    [fresh] = leases.leased
    assert (fresh.id, fresh.provider, fresh.event_id, fresh.event_type) == (
        fresh_id,
        "stripe",
        "evt_fresh",
        "customer.created",
    )
    assert (fresh.payload, fresh.attempts, fresh.error_kind) == ({"id": "evt_fresh"}, 1, None)
    assert fresh.lease_expires_at is not None
    assert fresh.received_at < fresh.lease_expires_at
    [spent] = leases.dead_lettered
    assert (spent.id, spent.event_id, spent.attempts) == (spent_id, "evt_spent", 3)
    assert (spent.error_kind, spent.lease_expires_at) == ("lease_expired", None)


def test_a_batch_is_leased_in_id_order_whatever_join_the_planner_picks(
    conn: psycopg.Connection[Any],
) -> None:
    """The processor handles a batch in the order its lease returns (ids: arrival order). An
    UPDATE's RETURNING follows the plan, so the statement orders it itself: here a sequential
    scan of a heap whose even rows were updated (their new versions after the odd ones), as
    rows updated again and again end up."""
    ids = [_claim(conn, f"evt_{n:02d}").id for n in range(40)]
    conn.execute("UPDATE webhook_events SET updated_at = now() WHERE id % 2 = 0")
    with conn.transaction():
        for plan in ("nestloop", "mergejoin", "indexscan", "bitmapscan"):
            conn.execute(f"SET LOCAL enable_{plan} = off")
        leases = inbox.take_leases(
            conn, list(reversed(ids)), owner="w", lease_seconds=60, max_attempts=3
        )
    assert [e.id for e in leases.leased] == ids


def test_status_summary_covers_every_status(conn: psycopg.Connection[Any]) -> None:
    _claim(conn, "evt_1")
    _claim(conn, "evt_2")
    summary = inbox_upkeep.status_summary(conn)
    assert set(summary) == set(inbox.STATUSES)
    assert summary["received"].count == 2
    assert summary["received"].oldest_received_at is not None
    assert summary["processed"].count == 0


def test_outbox_dedup_key_is_unique(conn: psycopg.Connection[Any]) -> None:
    source = _claim(conn, "evt_1").id
    kwargs = {"topic": "t", "deduplication_key": "stripe:evt_1:t", "payload": {"a": 1}}
    assert outbox.add_message(conn, source_event_id=source, **kwargs)
    assert not outbox.add_message(conn, source_event_id=source, **kwargs)
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(
            "INSERT INTO outbox_messages (topic, deduplication_key, payload)"
            " VALUES ('t', %s, '{}')",
            ("stripe:evt_1:t",),
        )


def test_outbox_claims_from_two_connections_are_disjoint(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as setup:
        for i in range(300):
            outbox.add_message(
                setup, topic="t", deduplication_key=f"k{i}", payload={}, source_event_id=None
            )
    barrier = threading.Barrier(2)

    def claim(_: int) -> list[int]:
        with psycopg.connect(database_url, autocommit=True) as own:
            barrier.wait(timeout=30)
            got: list[int] = []
            while batch := outbox.claim_messages(own, limit=25, lease_seconds=60):
                got += [m.id for m in batch]
            return got

    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(claim, range(2))
    assert set(a).isdisjoint(b)
    assert len(a) + len(b) == 300


def test_outbox_retry_dead_and_published(conn: psycopg.Connection[Any]) -> None:
    for key in ("a", "b", "c"):
        outbox.add_message(conn, topic="t", deduplication_key=key, payload={}, source_event_id=None)
    claimed = {
        m.deduplication_key: m for m in outbox.claim_messages(conn, limit=10, lease_seconds=60)
    }
    assert outbox.claim_messages(conn, limit=10, lease_seconds=60) == []  # leased
    outbox.mark_published(conn, [claimed["a"].id])
    outbox.mark_retry(conn, claimed["b"].id, delay_seconds=3600, error="throttled")
    outbox.mark_dead(conn, claimed["c"].id, error="rejected")
    backlog = outbox.message_backlog(conn)
    assert (backlog.pending, backlog.dead) == (1, 1)
    assert outbox.claim_messages(conn, limit=10, lease_seconds=60) == []  # b not yet due


def test_an_expired_outbox_lease_is_reclaimable(conn: psycopg.Connection[Any]) -> None:
    outbox.add_message(conn, topic="t", deduplication_key="k", payload={}, source_event_id=None)
    [first] = outbox.claim_messages(conn, limit=10, lease_seconds=60)
    conn.execute("UPDATE outbox_messages SET lease_expires_at = now() - interval '1 second'")
    [again] = outbox.claim_messages(conn, limit=10, lease_seconds=60)
    assert again.id == first.id
    assert again.attempts == 2


def test_lease_must_be_positive(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(ValueError, match="positive"):
        inbox.lease_events(conn, [1], owner="w", lease_seconds=0)


def _attempts(conn: psycopg.Connection[Any], row_id: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT attempt, outcome, error_kind, ended_at >= started_at"
        " FROM webhook_event_attempts WHERE event_row_id = %s ORDER BY started_at, attempt",
        (row_id,),
    ).fetchall()


def test_every_attempt_that_did_not_process_the_event_is_recorded_with_its_times(
    conn: psycopg.Connection[Any],
) -> None:
    """Failed, expired (by the sweeper and by a takeover) and dead-lettered attempts each leave
    a row from their lease to their end; the attempt that processes the event leaves none."""
    row_id = _claim(conn, "evt_history").id

    def lease_runs_out() -> None:  # now, not in the past: a lease ends after it began
        conn.execute("UPDATE webhook_events SET lease_expires_at = now() WHERE id = %s", (row_id,))

    inbox.lease_events(conn, [row_id], owner="w1", lease_seconds=60)
    inbox.mark_failed(conn, row_id, owner="w1", delay_seconds=0, error_kind="Timeout", error="x")
    inbox.lease_events(conn, [row_id], owner="w2", lease_seconds=60)
    lease_runs_out()
    inbox_upkeep.expire_leases(conn, max_attempts=10, limit=100)  # attempt 2: the sweeper
    inbox.lease_events(conn, [row_id], owner="w3", lease_seconds=60)
    lease_runs_out()
    inbox.lease_events(conn, [row_id], owner="w4", lease_seconds=60)  # attempt 3: a takeover
    inbox.mark_dead_letter(conn, row_id, owner="w4", error_kind="Permanent", error="y")

    assert _attempts(conn, row_id) == [
        (1, "failed", "Timeout", True),
        (2, "lease_expired", "lease_expired", True),
        (3, "lease_expired", "lease_expired", True),
        (4, "dead_letter", "Permanent", True),
    ]
    fine = _claim(conn, "evt_fine").id
    inbox.lease_events(conn, [fine], owner="w", lease_seconds=60)
    inbox.mark_processed(conn, fine, owner="w")
    assert _attempts(conn, fine) == []
