"""The sweeper on an idle stack, measured: what ``bench.at_rest_prices`` takes for its run.

    python -m bench.sweeper_at_rest [--sweeps 40] [--db-rtt-ms 1] [--send-ms 10]

The real handler (functions/sweeper/app.py, in a fresh interpreter as ``bench.cost`` runs it)
sweeps an empty, migrated database ``--sweeps`` times behind the same injected latency as the
cost run (PostgreSQL ``--db-rtt-ms`` away, AWS ``--send-ms``). Prints each memory size's billed
duration (the median run: wait plus CPU scaled below one vCPU, as ``bench.cost`` bills it) and
the bytes a run writes, beside the bytes bench/idle_sweep.py renders for the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from bench import cost_rig
from bench.cost_child import ROOT
from bench.idle_sweep import idle_sweep
from bench.memory_sizing import billed_ms
from bench.template_deployment import deployment

MEMORY_SIZES = (128, 256, 512, 1024, 1769)


def measure(sweeps: int, db_rtt_ms: float, send_ms: float) -> dict[str, object]:
    with cost_rig.infrastructure(db_rtt_ms, send_ms) as infra:
        url = cost_rig._database_for(infra, ROOT, f"wi_idle_sweep_{os.getpid()}")
        env = cost_rig.function_env(infra, url)
        spec = {
            "tree": str(ROOT),
            "function": "sweeper",
            "env": env,
            "deliveries": 0,
            "duplicate_share": 0.0,
            "batch_size": 10,
            "moto_endpoint": infra["moto_endpoint"],
            "sweeps": sweeps,
            "send_ms": send_ms,  # each AWS call counted at the injected round trip
        }
        found = cost_rig.run_child(spec)
    runs = found["invocations"][1:]  # the first opens the connection: a cold start's share
    billed = {
        mb: statistics.median(billed_ms(r["wall_ms"], r["cpu_ms"], mb) for r in runs)
        for mb in MEMORY_SIZES
    }
    return {
        "billed_ms": billed,
        "wall_ms": statistics.median(r["wall_ms"] for r in runs),
        "cpu_ms": statistics.median(r["cpu_ms"] for r in runs),
        "bytes": statistics.median(r["bytes"] for r in runs),
        "peak_rss_mb": found["peak_rss_mb"],
        "sample": runs[0]["lines"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sweeps", type=int, default=40)
    parser.add_argument("--db-rtt-ms", type=float, default=1.0)
    parser.add_argument("--send-ms", type=float, default=10.0)
    args = parser.parse_args()
    found = measure(args.sweeps, args.db_rtt_ms, args.send_ms)
    rendered = idle_sweep(deployment("default"), "SweeperFunction")
    own = [line for line in rendered.lines if "type" not in line]  # platform lines have "type"
    own_bytes = sum(len(json.dumps(line, separators=(",", ":"))) + 1 for line in own)
    print(f"{args.sweeps - 1} warm idle sweeps (the first, which connects, left out)")
    print(f"median wall {found['wall_ms']:.1f} ms, CPU {found['cpu_ms']:.2f} ms")
    print(f"billed ms by memory size (median): {found['billed_ms']}")
    print(f"peak RSS {found['peak_rss_mb']:.0f} MB")
    print(
        f"bytes a run: the handler wrote {found['bytes']:.0f}; bench/idle_sweep.py renders"
        f" {own_bytes} in {len(own)} lines"
    )
    for line in found["sample"]:
        print(f"  {line[:160]}")


if __name__ == "__main__":
    main()
