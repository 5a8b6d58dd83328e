"""The report and chart of ``bench.processing_throughput``: events/s, CPU per event, round trips
and commits per variant, and the paired per-round ratios (the framework's price over the same
SQL issued directly, the handler guard's, a pacing limit's, and with ``--baseline`` the processor
against another tree's).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.common import (
    WireCount,
    chart_path,
    machine_details,
    machine_line,
    median,
    pyplot,
    statement_mix,
    table,
)
from bench.cpu import Sample

TARGET_ROUND_TRIPS = 3
SAME_SQL = "same SQL, no framework"
ONE_PER_TRANSACTION = "one event per transaction"
UNGUARDED = "processor without the handler guard"
PACED_ELSEWHERE = "processor, another key paced"
IN_A_CHILD = "processor, in a child process like the baseline"


def _paired(
    samples: dict[str, list[Sample]], a: str, b: str, value: Callable[[Sample], float]
) -> str:
    """``a`` ÷ ``b`` round by round (the two ran back to back in each round), which a busy
    machine's drift between rounds disturbs less than the ratio of the medians."""
    ratios = sorted(value(x) / value(y) for x, y in zip(samples[a], samples[b], strict=True))
    return f"median {median(ratios):.2f}x, range {ratios[0]:.2f}x to {ratios[-1]:.2f}x"


def _total_ms(sample: Sample) -> float:
    return sample.client_ms + (sample.server_ms or 0.0)


def report(
    samples: dict[str, list[Sample]],
    counts: dict[str, WireCount],
    command: str,
    url: str,
    n: int,
    *,
    baseline: str | None = None,
) -> str:
    def rate(name: str) -> float:
        return median([s.rate for s in samples[name]])

    def cpu(name: str) -> float:
        return median([s.client_ms for s in samples[name]])

    def server(name: str) -> str:
        found = [s.server_ms for s in samples[name] if s.server_ms is not None]
        return f"{median(found):.3f}" if len(found) == len(samples[name]) else "n/a"

    rows = []
    for name in samples:
        trips, commits = counts[name] / n
        rows.append(
            [
                name,
                f"{rate(name):,.0f}",
                f"{rate(name) / rate(SAME_SQL):.2f}x",
                f"{rate(name) / rate(ONE_PER_TRANSACTION):.2f}x",
                f"{rate(name) / rate(UNGUARDED):.2f}x",
                f"{cpu(name):.3f}",
                server(name),
                f"{cpu(name) / cpu(UNGUARDED):.2f}x",
                f"{trips:g}",
                f"{commits:g}",
            ]
        )
    mix = statement_mix(counts["processor"].statements, n)
    rounds = len(samples["processor"])
    lines = [
        "## Processing: batches of 10",
        "",
        f"`{command}` — {machine_line(machine_details(url))}.",
        "",
        "Events/s and CPU milliseconds per event (medians over the rounds; inside a round the"
        " variants take turns batch by batch) and, per batch of 10 in the happy path, database"
        " round trips and commits counted from libpq's"
        " protocol trace. *Client CPU* is the benchmark process's CPU time around each"
        " variant's batches (the processor's Python, psycopg, libpq); *server CPU* the CPU time"
        " of the PostgreSQL backend serving it (`/proc/<pid>/schedstat`)."
        f" Target: ≤ {TARGET_ROUND_TRIPS} round trips per batch.",
        "",
        table(
            [
                "variant",
                "events/s",
                "vs same SQL (a)",
                "vs one event per txn (b)",
                "vs no handler guard (c)",
                "client CPU ms / event",
                "server CPU ms / event",
                "client CPU vs (c)",
                "round trips / batch",
                "commits / batch",
            ],
            rows,
        ),
        "",
        f"Statements the processor sends per batch: {mix}.",
        "",
        f"Framework: processor ÷ {SAME_SQL} (the same statements, transactions and waits issued"
        " directly), per round over"
        f" {rounds} rounds: events/s {_paired(samples, 'processor', SAME_SQL, lambda s: s.rate)};"
        " client CPU per event"
        f" {_paired(samples, 'processor', SAME_SQL, lambda s: s.client_ms)}; client and server"
        f" CPU per event {_paired(samples, 'processor', SAME_SQL, _total_ms)}.",
        "",
        f"Handler guard: processor ÷ processor without the guard, per round over {rounds}"
        f" rounds: events/s {_paired(samples, 'processor', UNGUARDED, lambda s: s.rate)};"
        " client CPU per event"
        f" {_paired(samples, 'processor', UNGUARDED, lambda s: s.client_ms)}; client and"
        f" server CPU per event {_paired(samples, 'processor', UNGUARDED, _total_ms)}.",
        "",
    ]
    if baseline is not None:
        lines += [
            f"Against {baseline} (its own processor and example handler, run by its own"
            " benchmark module in a child process with its own interpreter and database on the"
            " same server, taking its turn batch by batch), this tree's processor run the same"
            f" way ({IN_A_CHILD}) ÷ it, per round: client CPU per event"
            f" {_paired(samples, IN_A_CHILD, baseline, lambda s: s.client_ms)}; client and"
            f" server CPU per event {_paired(samples, IN_A_CHILD, baseline, _total_ms)};"
            f" events/s {_paired(samples, IN_A_CHILD, baseline, lambda s: s.rate)}.",
            "",
        ]
    lines += [
        "Pacing: processor with a limit on another key ÷ processor, per round: events/s"
        f" {_paired(samples, PACED_ELSEWHERE, 'processor', lambda s: s.rate)} over {rounds}"
        " rounds.",
        "",
        "![processing throughput](benchmarks/processing.png)",
    ]
    return "\n".join(lines)


def chart(samples: dict[str, list[Sample]], counts: dict[str, WireCount], n: int) -> None:
    plt = pyplot()
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 4.2), dpi=110)
    names = list(samples)
    colors = ["tab:blue", "tab:green", "tab:cyan", "tab:gray", "tab:orange", "tab:olive"]
    colors += ["tab:purple"]
    colors = colors[: len(names)]
    left.barh(names, [median([s.rate for s in samples[name]]) for name in names], color=colors)
    left.set_xlabel("events per second")
    left.set_title("Throughput, batches of 10")
    middle.barh(
        names, [median([s.client_ms for s in samples[name]]) for name in names], color=colors
    )
    middle.set_xlabel("client CPU ms per event")
    middle.set_title("Client CPU")
    right.barh(names, [counts[name].round_trips / n for name in names], color=colors)
    right.axvline(TARGET_ROUND_TRIPS, color="red", linestyle="--", label="target")
    right.set_xlabel("round trips per batch of 10")
    right.set_title("Database round trips")
    right.legend(fontsize=8)
    for ax in (left, middle, right):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    for ax in (middle, right):
        ax.set_yticks(range(len(names)), [""] * len(names))
    fig.tight_layout()
    fig.savefig(chart_path("processing"))
    plt.close(fig)
