"""A batch's rows are leased at most MAX_ROWS_PER_LEASE at a time.

Re-wake messages carry up to 25 row ids, so ten messages may name 250 rows: leased together,
their payloads (up to MaxBodyBytes each) would all be in memory at once, while the processor's
memory was measured for ten (bench/processor_memory.py). The processor now runs a batch's ids in
chunks, each leased, run and committed before the next, and hands back the ids it had no time
to lease.
"""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import psycopg
import pytest

from tests.integration.processing.helpers import failures, invoke, row, sqs_event, store_event
from tests.support import FakeLambdaContext
from webhook_inbox.processing import batch as processing


def _customers(conn: psycopg.Connection[Any], count: int) -> list[int]:
    return [
        store_event(
            conn, event_type="customer.created", payload={"data": {"object": {"id": f"cus_{n}"}}}
        )
        for n in range(count)
    ]


def _rewake(row_ids: list[int]) -> str:
    return json.dumps({"ids": row_ids})


@pytest.fixture
def leased_per_call(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each lease statement of the processor leased."""
    counts: list[int] = []
    real = processing.inbox.take_leases

    def counting(*args: Any, **kwargs: Any) -> Any:
        leases = real(*args, **kwargs)
        counts.append(len(leases.leased) + len(leases.dead_lettered))
        return leases

    monkeypatch.setattr(processing.inbox, "take_leases", counting)
    return counts


def test_a_batch_of_sixty_rows_is_leased_ten_at_a_time(
    processor: ModuleType, conn: psycopg.Connection[Any], leased_per_call: list[int]
) -> None:
    rows = _customers(conn, 60)
    event = sqs_event([_rewake(rows[n : n + 20]) for n in range(0, 60, 20)])

    response = invoke(processor, event)

    assert failures(response) == []
    assert {row(conn, r)["status"] for r in rows} == {"processed"}
    # Before: one lease of all 60 rows.
    assert leased_per_call == [processing.MAX_ROWS_PER_LEASE] * 6
    customers = conn.execute("SELECT count(*) FROM customers").fetchone()
    assert customers == (60,)


def test_time_running_short_hands_back_exactly_the_messages_with_rows_not_done(
    processor: ModuleType,
    conn: psycopg.Connection[Any],
    leased_per_call: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = _customers(conn, 60)
    bodies = {
        "done": _rewake(rows[0:20]),
        "straddles": _rewake(rows[20:25] + rows[55:60]),
        "later": _rewake(rows[25:40]),
        "last": _rewake(rows[40:55]),
        "single, done": json.dumps({"id": rows[5]}),
    }
    event = sqs_event(list(bodies.values()))
    message_of = {r["messageId"]: name for r, name in zip(event["Records"], bodies, strict=True)}
    context = FakeLambdaContext(remaining_ms=60_000)
    real_chunk = processing._process_chunk
    chunks_done: list[int] = []

    def time_runs_short_after_two_chunks(*args: Any, **kwargs: Any) -> Any:
        outcome = real_chunk(*args, **kwargs)
        chunks_done.append(len(args[0]))
        if len(chunks_done) == 2:
            context.remaining_ms = processing.passes.STOP_MARGIN_MS - 1
        return outcome

    monkeypatch.setattr(processing, "_process_chunk", time_runs_short_after_two_chunks)

    response = invoke(processor, event, context)

    assert sorted(message_of[m] for m in failures(response)) == ["last", "later", "straddles"]
    assert {row(conn, r)["status"] for r in rows[:20]} == {"processed"}
    # The rows not reached were never leased: no attempt spent, nothing to wait out.
    untouched = {(row(conn, r)["status"], row(conn, r)["attempts"]) for r in rows[20:]}
    assert untouched == {("received", 0)}
    assert leased_per_call == [10, 10]

    # SQS delivers the three messages again: every row ends processed, none lost.
    context.remaining_ms = 60_000
    again = {"Records": [r for r in event["Records"] if r["messageId"] in failures(response)]}
    assert failures(invoke(processor, again, context)) == []
    assert {row(conn, r)["status"] for r in rows} == {"processed"}
