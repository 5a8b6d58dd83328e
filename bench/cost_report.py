"""bench.cost's report: the Markdown section docs/benchmarks.md keeps (time, log bytes, the bill
beside the floor, the memory table, a sample line of each function).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from typing import Any

from bench import memory_sizing
from bench.cost_bill import (
    SCHEDULED_RUNS_PER_MONTH,
    Bill,
    Deployment,
    Prices,
    Workload,
    _access_samples,
    access_log_line,
    bill,
)
from bench.cost_rig import FUNCTIONS, Measured
from bench.memory_sizing import LAMBDA_FULL_VCPU_MB, SIZES_MB, WITHIN_NEXT


def _p(samples: list[float], q: float) -> float:
    return memory_sizing.percentile(samples, q)


def memory_table(found: dict[str, Any]) -> list[list[str]]:
    """One row per function and size from :func:`memory_sizing.measurements`; the sweeper's
    runs with nothing to publish and those that drained the mix's outbox apart."""
    rows = []
    functions = found["functions"]
    groups = [
        ("ingest", functions["ingest"]),
        ("processor", functions["processor"]),
        ("sweeper, nothing to publish", functions["sweeper"]),
        (
            f"sweeper, draining up to {functions['sweeper']['backlog']['published']} messages",
            {**functions["sweeper"]["backlog"], "peak_rss_mb": functions["sweeper"]["peak_rss_mb"]},
        ),
    ]
    for label, entry in groups:
        sizes = {int(mb): f for mb, f in entry["sizes"].items()}
        chosen = memory_sizing.rule_size({mb: f["p99"] for mb, f in sizes.items()})
        for mb in SIZES_MB:
            bigger = [size for size in SIZES_MB if size > mb]
            figures = sizes[mb]
            rows.append(
                [
                    label,
                    f"{mb}",
                    f"{entry['peak_rss_mb']:.0f}",
                    f"{figures['p50']:.0f} / {figures['p99']:.0f}",
                    f"{figures['p99'] / sizes[bigger[0]]['p99']:.2f}x" if bigger else "",
                    "**the rule's**" if mb == chosen else "",
                    f"{figures['init_ms']:.0f}",
                    f"{figures['cold_ms']:.0f}" if "cold_ms" in figures else "",
                    f"${figures['usd_per_million']:.4f}",
                ]
            )
    return rows


def render(  # noqa: PLR0917 - one report, all its inputs
    results: dict[str, dict[str, Measured]],
    deployments: dict[str, Deployment],
    prices: Prices,
    workload: Workload,
    args: argparse.Namespace,
    command: str,
    memory_found: dict[str, Any],
) -> str:
    from bench.common import table

    lines = ["## Cost per million webhooks (all in)", "", f"`{command}` — {_machine()}.", ""]
    lines += [
        f"Mix: {args.deliveries} signed Stripe deliveries per round"
        f" ({args.duplicate_share:.0%} sent twice, each right behind its original),"
        f" processor batches of {workload.batch_size},"
        f" {args.sweeps} sweeps;"
        f" {args.rounds} rounds, trees alternating. PostgreSQL round trip {args.db_rtt_ms} ms and"
        f" every AWS call {args.send_ms} ms, injected by `tests/faults/proxy.py` (moto behind it"
        " for SQS). Per webhook = per stored event: its deliveries (duplicates included), a"
        f" {1 / workload.batch_size:g} share of a batch, and the sweeper's"
        f" {SCHEDULED_RUNS_PER_MONTH:,} runs a month spread over"
        f" {workload.webhooks_per_month:,.0f} webhooks a month. Cold-start rate"
        f" {workload.cold_start_rate:.1%} of invocations (billed INIT).",
        "",
    ]
    timing_rows, log_rows = [], []
    bills: dict[tuple[str, str], Bill] = {}
    for label, m in results.items():
        ingest = m["ingest"]
        batch = m["processor"]
        p50 = _p(ingest.wall_ms, 50)
        timing_rows.append(
            [
                label,
                f"{p50:.2f} / {_p(ingest.wall_ms, 99):.2f}",
                f"{statistics.median(ingest.cpu_ms):.2f}",
                f"{statistics.mean(ingest.rig_ms):.2f}",
                f"{_p(batch.wall_ms, 50):.1f} / {_p(batch.wall_ms, 99):.1f}",
                f"{statistics.median(m['sweeper'].wall_ms):.0f}",
                " / ".join(f"{statistics.median(m[f].peak_rss_mb):.0f}" for f in FUNCTIONS),
            ]
        )
        for endpoint in ("HttpApi", "FunctionUrl"):
            bills[(label, endpoint)] = bill(m, deployments[label], endpoint, prices, workload, p50)
        b = bills[(label, "HttpApi")]
        deployment = deployments[label]
        access_bytes = (
            len(access_log_line(deployment.access_log_format, _access_samples(p50))) + 1
            if deployment.access_log_format
            else 0
        )
        log_rows.append(
            [
                label,
                *(f"{b.log_bytes_by_function[f]:.0f}" for f in FUNCTIONS),
                f"**{b.log_bytes_per_webhook:.0f}**",
                f"{access_bytes} ({deployment.log_class.get('access', 'STANDARD').lower()})",
                ", ".join(f"{f} {deployments[label].memory_mb[f]}" for f in FUNCTIONS),
                deployments[label].logging["ingest"].get("LogFormat", "Text")
                + " / "
                + ", ".join(
                    f"{f} {deployments[label].logging[f].get('SystemLogLevel', '-')}"
                    for f in FUNCTIONS
                ),
            ]
        )
    labels = list(results)
    if len(labels) == 2:
        base, new = labels
        ratio = _p(results[new]["ingest"].wall_ms, 50) / _p(results[base]["ingest"].wall_ms, 50)
        timing_rows.append([f"{new} / {base}", f"{ratio:.2f}x (p50)", "", "", "", "", ""])
    lines += [
        "Time (this machine, wall clock with the injected latency):",
        "",
        table(
            [
                "tree",
                "ingest p50 / p99 ms",
                "ingest CPU ms",
                "ingest: rig's wait taken off, mean ms",
                "processor batch p50 / p99 ms",
                "sweep ms",
                "peak RSS MB (i/p/s)",
            ],
            timing_rows,
        ),
        "",
        _rig_note(results[labels[-1]]["ingest"], deployments[labels[-1]], prices, args.send_ms),
        "",
    ]
    lines += [
        "Log bytes per webhook (each function's own output, captured, plus the runtime's"
        " lines for the template's LoggingConfig; the access log's line rendered from the"
        " template's format; each priced by its log group's class):",
        "",
        table(
            [
                "tree",
                "ingest",
                "processor",
                "sweeper",
                "total",
                "HTTP API access log, per request (class)",
                "memory MB",
                "log format / system level",
            ],
            log_rows,
        ),
        "",
    ]
    items = list(next(iter(bills.values())).items)
    header = ["USD per million webhooks", *[f"{lab}, {ep}" for lab, ep in bills]]
    rows = []
    keys: list[str] = []
    for b in bills.values():
        keys += [k for k in b.items if k not in keys]
    for key in keys:
        rows.append(
            [key, *(f"{b.items[key]:.4f}" if key in b.items else "—" for b in bills.values())]
        )
    rows.append(["**all in (outbox excluded)**", *(f"**{b.total:.3f}**" for b in bills.values())])
    rows.append(
        ["floor (endpoint + Lambda + SQS requests)", *(f"{b.floor:.3f}" for b in bills.values())]
    )
    rows.append(["**all in / floor**", *(f"**{b.total / b.floor:.3f}x**" for b in bills.values())])
    del items
    lines += [table(header, rows), ""]
    lines += [
        "Prices and assumptions (each one an argument of the script): "
        + ", ".join(f"`{k}` {v:g}" for k, v in vars(prices).items())
        + "; "
        + ", ".join(f"`{k}` {v:g}" for k, v in vars(workload).items())
        + ".",
        "",
    ]
    current = labels[-1]
    lines += [
        f"Memory (tree `{current}`): billed duration per invocation at each size, from the"
        f" measured wait and CPU time (CPU scaled by {LAMBDA_FULL_VCPU_MB} MB / size below"
        " one vCPU), INIT at that size (ingest: with its first delivery, a cold start), and the"
        " GB-seconds cost per million invocations; the defaults chosen from it are in"
        ' docs/costs.md, "Memory sizes":',
        "",
        table(
            [
                "function",
                "MB",
                "peak RSS MB",
                "billed p50 / p99 ms",
                "p99 vs next size up",
                f"cheapest within {WITHIN_NEXT:.2f}x of the next",
                "INIT ms",
                "INIT + first call ms",
                "USD per million invocations",
            ],
            memory_table(memory_found),
        ),
        "",
    ]
    lines += ["A line of each (first invocation, as captured):", ""]
    for label, m in results.items():
        for function in FUNCTIONS:
            for sample in m[function].sample_lines[:2]:
                lines.append(f"- {label} {function} ({len(sample.encode())} B): `{sample[:400]}`")
    return "\n".join(lines)


def _rig_note(ingest: Measured, deployment: Deployment, prices: Prices, send_ms: float) -> str:
    """What the rig's own wait, taken off each delivery's, would have cost had it been billed."""
    rig_ms = statistics.mean(ingest.rig_ms)
    memory = deployment.memory_mb["ingest"]
    usd = rig_ms / 1000 * memory / 1024 * prices.lambda_gb_second_arm * 1e6
    return (
        f"Each AWS call counts as the injected {send_ms:g} ms round trip plus its own CPU time:"
        " what it waited beyond that was the rig's (moto's service time, the new connection"
        " werkzeug's server makes every request open, the proxy's scheduling) and is taken off"
        f" the invocation's wall time, {rig_ms:.2f} ms per ingest delivery on average here. Left"
        f" in, at {memory} MB it would add ${usd:.4f} per million webhooks to the GB-seconds"
        " below. The CPU of opening each connection stays in (a warm function keeps its"
        " connection to SQS alive)."
    )


def _machine() -> str:
    import platform

    cpu = platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {os.cpu_count()} CPUs ({cpu}),"
        f" load average {os.getloadavg()[0]:.1f} at the end · Python {platform.python_version()}"
    )
