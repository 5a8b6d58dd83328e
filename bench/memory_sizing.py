"""Memory sizes by measurement: the rule, the constraints, the defaults (docs/costs.md, "Memory
sizes").

``python -m bench.cost`` measures each function's billed duration at every candidate size and
writes it to ``bench/results/cost_memory.json`` (:func:`measurements`); ``python -m
bench.cost_at_rest --write`` renders the table from that file and the template's defaults
(:func:`render`), and tests/unit/infra/test_cost_at_rest.py checks that docs/costs.md holds
exactly that and that every default meets its constraints.

The rule: a function's size is the cheapest candidate whose p99 billed duration is within 10 %
of the next candidate's (more memory would buy back less than a tenth of its latency).
Constraints are the documented exceptions, each a smallest size:

- ingest: a cold start (INIT and the first delivery, billed at that size) within Slack's 3 s
  (the sender with the shortest timeout; the rig leaves out a cold start's TLS handshake with
  the database and its read of the providers registry from Secrets Manager, so the margin
  under 3 s is what those may take);
- ingest: the body its memory parses (``bodies.memory_body_limit``) at least ``MaxBodyBytes``'
  default;
- processor: its worst batch (ten bodies at ``MaxBodyBytes``' default, ``python -m
  bench.processor_memory``) within two thirds of the size, the rest for the runtime and the
  application's handlers;
- sweeper: a run that drains the benchmark's outbox backlog ends within half its timeout.

A default below the rule's pick says what the rule's size would add per million webhooks.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "cost_memory.json"
SIZES_MB = (128, 256, 512, 1024, 1769)
LAMBDA_FULL_VCPU_MB = 1769
WITHIN_NEXT = 1.10
COLD_START_LIMIT_MS = 3000
# `python -m bench.processor_memory --sizes 1048576 4194304`, 2026-12-02 (docs/benchmarks.md,
# "Processor memory: the worst batch"): peak RSS after ten bodies of 1,048,576 B.
PROCESSOR_WORST_BATCH_RSS_MB = 130
PROCESSOR_RSS_SHARE = 2 / 3
SWEEPER_TIMEOUT_SHARE = 0.5

PARAMETERS = {
    "ingest": "IngestMemorySize",
    "processor": "ProcessorMemorySize",
    "sweeper": "SweeperMemorySize",
}


def billed_ms(wall_ms: float, cpu_ms: float, memory_mb: int) -> int:
    """Lambda's billed duration at ``memory_mb``: the wait as measured, the CPU time scaled by
    the share of a vCPU that size gets (one vCPU at 1,769 MB), rounded up to 1 ms."""
    scale = max(1.0, LAMBDA_FULL_VCPU_MB / memory_mb)
    return max(1, math.ceil(max(0.0, wall_ms - cpu_ms) + cpu_ms * scale))


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def rule_size(p99_by_size: dict[int, float]) -> int:
    """The cheapest size whose p99 is within ``WITHIN_NEXT`` of the next size up's."""
    sizes = sorted(p99_by_size)
    for small, big in itertools.pairwise(sizes):
        if p99_by_size[small] <= WITHIN_NEXT * p99_by_size[big]:
            return small
    return sizes[-1]


def _sizes(
    runs: list[tuple[float, float]], init: list[tuple[float, float]], gb_second_usd: float
) -> dict[str, dict[str, float]]:
    out = {}
    for mb in SIZES_MB:
        billed = [billed_ms(w, c, mb) for w, c in runs]
        init_ms = statistics.median(billed_ms(w, c, mb) for w, c in init)
        out[str(mb)] = {
            "p50": percentile(billed, 50),
            "p99": percentile(billed, 99),
            "init_ms": init_ms,
            "usd_per_million": statistics.mean(billed) / 1000 * mb / 1024 * gb_second_usd * 1e6,
        }
    return out


def measurements(
    measured: dict[str, Any], gb_second_usd: float, per_webhook: dict[str, float], source: str
) -> dict[str, Any]:
    """What :func:`render` needs from one tree's ``bench.cost`` measurements (``Measured`` by
    function): the sweeper's runs split into those that published nothing and those that
    drained the mix's outbox."""
    functions: dict[str, Any] = {}
    for function in PARAMETERS:
        m = measured[function]
        runs = list(zip(m.wall_ms, m.cpu_ms, strict=True))
        init = list(zip(m.init_wall_ms, m.init_cpu_ms, strict=True))
        entry: dict[str, Any] = {
            "per_webhook": per_webhook[function],
            "peak_rss_mb": statistics.median(m.peak_rss_mb),
        }
        if function == "sweeper":
            idle = [r for r, n in zip(runs, m.published, strict=True) if n == 0]
            backlog = [r for r, n in zip(runs, m.published, strict=True) if n > 0]
            entry["runs"] = len(idle)
            entry["sizes"] = _sizes(idle, init, gb_second_usd)
            entry["backlog"] = {
                "runs": len(backlog),
                "published": max(m.published),
                "sizes": _sizes(backlog, init, gb_second_usd),
            }
        else:
            entry["runs"] = len(runs)
            entry["sizes"] = _sizes(runs, init, gb_second_usd)
        if function == "ingest":
            first = list(zip(m.first_wall_ms, m.first_cpu_ms, strict=True))
            for mb in SIZES_MB:
                cold = [
                    billed_ms(iw, ic, mb) + billed_ms(fw, fc, mb)
                    for (iw, ic), (fw, fc) in zip(init, first, strict=True)
                ]
                entry["sizes"][str(mb)]["cold_ms"] = statistics.median(cold)
        functions[function] = entry
    return {"source": source, "functions": functions}


def write(found: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(RESULTS.read_text())
    return loaded


def constraint(function: str, entry: dict[str, Any], template: dict[str, Any]) -> tuple[int, str]:
    """The smallest candidate size the function's constraints allow, and what they are."""
    sizes = {int(mb): figures for mb, figures in entry["sizes"].items()}
    if function == "ingest":
        from webhook_inbox.ingest.bodies import memory_body_limit

        body = int(template["MaxBodyBytes"])
        cold = min(mb for mb in SIZES_MB if sizes[mb]["cold_ms"] <= COLD_START_LIMIT_MS)
        parses = min(mb for mb in SIZES_MB if memory_body_limit(mb) >= body)
        return max(cold, parses), (
            f"a cold start (INIT and the first delivery) within {COLD_START_LIMIT_MS:,} ms:"
            f" {sizes[128]['cold_ms']:,.0f} ms at 128 MB, {sizes[256]['cold_ms']:,.0f} at 256,"
            f" so ≥ {cold}; a {body / 2**20:g} MiB body (MaxBodyBytes) parsed: ≥ {parses}"
        )
    if function == "processor":
        need = PROCESSOR_WORST_BATCH_RSS_MB / PROCESSOR_RSS_SHARE
        smallest = min(mb for mb in SIZES_MB if mb >= need)
        return smallest, (
            f"the worst batch (10 bodies of 1 MiB) peaks at {PROCESSOR_WORST_BATCH_RSS_MB} MB"
            f" RSS, at most {PROCESSOR_RSS_SHARE:.0%} of the size: ≥ {smallest}"
        )
    backlog = {int(mb): f for mb, f in entry["backlog"]["sizes"].items()}
    limit = int(template["SweeperTimeout"]) * 1000 * SWEEPER_TIMEOUT_SHARE
    smallest = min(mb for mb in SIZES_MB if backlog[mb]["p99"] <= limit)
    return smallest, (
        f"a run draining {entry['backlog']['published']} outbox messages ends within half its"
        f" {template['SweeperTimeout']} s timeout ({backlog[128]['p99']:,.0f} ms at 128 MB):"
        f" ≥ {smallest}"
    )


def decide(found: dict[str, Any], template: dict[str, Any]) -> list[dict[str, Any]]:
    """Per function: the rule's pick, the constraints' minimum, the default and why."""
    rows = []
    for function, parameter in PARAMETERS.items():
        entry = found["functions"][function]
        sizes = {int(mb): figures for mb, figures in entry["sizes"].items()}
        pick = rule_size({mb: f["p99"] for mb, f in sizes.items()})
        minimum, text = constraint(function, entry, template)
        default = int(template[parameter])
        per_webhook = entry["per_webhook"]

        def usd(mb: int, per: float = per_webhook, table: dict[int, Any] = sizes) -> float:
            return float(per * table[mb]["usd_per_million"])

        if default < minimum:
            why = f"**below the constraint's {minimum} MB**"
        elif default == max(pick, minimum):
            why = "the rule" if pick >= minimum else "the constraint"
        elif default > max(pick, minimum):
            why = "above what the rule and the constraint ask"
        else:
            why = (
                f"cost: below the rule's {pick} MB, which would add"
                f" ${usd(pick) - usd(default):.3f} per million webhooks for a p99"
                f" {sizes[default]['p99'] / sizes[pick]['p99']:.2f}x shorter"
                " (the per-million goals come first; the constraint is met)"
            )
        rows.append(
            {
                "function": function,
                "parameter": parameter,
                "p99": {mb: sizes[mb]["p99"] for mb in SIZES_MB},
                "pick": pick,
                "minimum": minimum,
                "constraint": text,
                "default": default,
                "usd_at_default": usd(default),
                "why": why,
            }
        )
    return rows


def render(found: dict[str, Any], template: dict[str, Any]) -> str:
    from bench.common import table

    rows = decide(found, template)
    sweeper = found["functions"]["sweeper"]
    backlog = sweeper["backlog"]
    head = [
        "## Memory sizes",
        "",
        "Each function's `MemorySize` default by the rule \"the cheapest size whose p99 billed"
        f' duration is within {WITHIN_NEXT - 1:.0%} of the next size up", raised where a'
        " constraint asks for more; billed durations from "
        f"{found['source']} (the measured wait plus the CPU time scaled by"
        f" {LAMBDA_FULL_VCPU_MB:,} MB / size below one vCPU). Rendered by `python -m"
        " bench.cost_at_rest --write` from bench/results/cost_memory.json (written by"
        " `python -m bench.cost`) and the template's defaults (bench/memory_sizing.py).",
        "",
    ]
    body = table(
        [
            "function (parameter)",
            *[f"p99 ms at {mb}" for mb in SIZES_MB],
            "the rule's pick",
            "constraint",
            "default",
            "GB-s USD per million webhooks at the default",
            "why",
        ],
        [
            [
                f"{r['function']} (`{r['parameter']}`)",
                *[f"{r['p99'][mb]:,.0f}" for mb in SIZES_MB],
                f"{r['pick']}",
                r["constraint"],
                f"**{r['default']}**",
                f"{r['usd_at_default']:.4f}",
                r["why"],
            ]
            for r in rows
        ],
    )
    backlog_p99 = " / ".join(f"{backlog['sizes'][str(mb)]['p99']:,.0f}" for mb in SIZES_MB)
    foot = [
        "",
        f"The sweeper's p99 is over its {sweeper['runs']} runs that found nothing to publish (a"
        " minute's work in the steady state; the idle ledger was off, so each run connected)."
        f" The {backlog['runs']} runs that drained the benchmark's outbox (up to"
        f" {backlog['published']} messages, in PutEvents calls of up to ten entries, each 10 ms"
        " away) took"
        f" {backlog_p99} ms at {' / '.join(str(mb) for mb in SIZES_MB)} MB: a p99 over every"
        " run would be theirs, thousands of ms; they are the constraint's case, not the"
        " rule's. Ingest and the processor: every delivery and batch of the run.",
    ]
    return "\n".join([*head, body, *foot])
