"""The at-rest bill as docs/costs.md shows it (``python -m bench.cost_at_rest`` measures, this
renders): a table per parameter set, the goals, the totals with traffic, and every price with
its source."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench import at_rest_prices as p
from bench.at_rest_prices import Line, Price, total

BEGIN, END = "<!-- cost:at-rest -->", "<!-- /cost:at-rest -->"
SUMMARY = ("<!-- cost:summary -->", "<!-- /cost:summary -->")
GOALS = {"default": 90.0, "small": 20.0, "aurora-paused": 5.0}  # USD a month at rest, each set
VOLUMES = (10_000, 1_000_000, 100_000_000)  # webhooks a month for the totals
COMMAND = "python -m bench.cost_at_rest --write"
SUMMARIES = {
    "default": "every default of `sam deploy --guided` (Multi-AZ PostgreSQL behind RDS Proxy)",
    "small": "one single-AZ db.t4g.micro, no RDS Proxy",
    "aurora-paused": "Aurora Serverless v2 paused at 0 ACUs while idle, no RDS Proxy",
}
# What a set's table depends on that the template cannot say, rendered under its table.
NOTES = {
    "aurora-paused": "Paused is the state this table prices, and the sweeper now allows it: a"
    " run with nothing"
    ' due leaves the database alone (the idle ledger, docs/design.md "Idle means idle"), so '
    "the writer pauses once nothing has connected for `AuroraSecondsUntilAutoPause` (300 s). "
    "After the last write the sweeper keeps connecting for up to about 7 minutes (a writer's "
    "activity mark covers its timeout and 5 minutes more, then one quiet run is recorded), "
    "and the 300 s start only then: about 12 minutes after the last delivery, once the "
    "functions' warm environments have let go of their connections too (Lambda keeps an idle "
    "environment, and its open connection, for a time AWS does not publish; not measured "
    "here). Once a day the sweeper's backstop run connects anyway and wakes it for those 300 "
    "s (the row above). Without the ledger the sweeper would connect every minute and the "
    "cluster would run at its least awake capacity, 0.5 ACU ($43.80 a month more). No RDS "
    "Proxy: its connections would keep the cluster awake, and in front of Serverless v2 it "
    "bills at least 8 ACUs ($87.60 a month). A delivery that finds the cluster paused resumes"
    " it (about 15 s, AWS says; longer after a long pause): ingest gives up after its 3 s "
    "connect timeout and answers 503, and a sender that retries has its retry accepted "
    '(docs/deploy.md, "Aurora", says which senders do).',
}
# Sets whose database bills capacity while traffic keeps it awake: what the traffic columns
# leave out for them (the per-million figure has no database in it).
AWAKE_WITH_TRAFFIC = {
    "aurora-paused": "`aurora-paused` with traffic: add the Aurora capacity of every hour the"
    " writer is awake, at least 0.5 ACU ($0.06 an hour), for as long as anything has connected"
    " in the last 5 minutes, and its I/O requests ($0.20 a million). Deliveries in every hour"
    " keep it awake all month: $43.80 or more beyond the row (`small`'s instance bills the same"
    " whatever the traffic); a few bursts a day cost a few of those hours each.",
}
TITLES = {
    "default": "`default`: what `sam deploy --guided` deploys with every default",
    "small": "`small`: `sam deploy --config-env small`",
    "aurora-paused": "`aurora-paused`: `sam deploy --config-env aurora-paused`, once paused",
}


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value - round(value)) < 1e-9 or value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _unit_price(price: Price) -> str:
    mark = " *" if price.estimate else ""
    if 0 < price.usd < 0.001:
        return f"{price.usd * 1e6:g} per million{mark}"
    return f"{price.usd:g}{mark}"


@dataclass(frozen=True)
class SetBill:
    """One parameter set: what its traffic figure depends on, and its lines at rest."""

    endpoint: str
    system_log_level: str
    lines: list[Line]
    memory_mb: dict[str, int] = field(default_factory=lambda: dict(p.TRAFFIC_MEASURED_MEMORY))
    ingest_system_log_level: str = "WARN"  # IngestSystemLogLevel


def platform_bytes_per_webhook(system_log_level: str, ingest_system_log_level: str) -> float:
    """Lambda's own lines per webhook beyond (or short of) what the measured traffic figure had
    at its levels (``p.TRAFFIC_MEASURED_LEVELS``): ingest's invocation at
    ``ingest_system_log_level`` and a batch's share of the processor's at ``system_log_level``,
    at the durations and memory of that run."""
    from bench.cost_bill import platform_lines

    def size(level: str, invocation: tuple[float, float, int, int]) -> float:
        per_webhook, duration_ms, memory_mb, used_mb = invocation
        lines = platform_lines(
            {"LogFormat": "JSON", "SystemLogLevel": level},
            duration_ms=duration_ms,
            memory_mb=memory_mb,
            used_mb=used_mb,
            init_ms=None,
        )
        return per_webhook * sum(len(line) + 1 for line in lines)

    levels = (ingest_system_log_level, system_log_level)  # TRAFFIC_INVOCATIONS' order
    return sum(
        size(level, invocation) - size(measured, invocation)
        for level, measured, invocation in zip(
            levels, p.TRAFFIC_MEASURED_LEVELS, p.TRAFFIC_INVOCATIONS, strict=True
        )
    )


def memory_difference_per_million(memory_mb: dict[str, int]) -> float:
    """What the set's ingest and processor memory sizes change in the measured GB-seconds."""
    change = 0.0
    for parameter, table in p.TRAFFIC_GB_S_PER_MILLION_INVOCATIONS.items():
        size = max((m for m in table if m <= memory_mb[parameter]), default=min(table))
        measured = table[p.TRAFFIC_MEASURED_MEMORY[parameter]]
        change += p.TRAFFIC_INVOCATIONS_PER_WEBHOOK[parameter] * (table[size] - measured)
    return change


def traffic_per_million(bill: SetBill) -> float:
    """The measured per-million figure without the sweeper's share (counted at rest), plus the
    platform lines the set's SystemLogLevel adds and what its memory sizes change."""
    extra_logs = (
        platform_bytes_per_webhook(bill.system_log_level, bill.ingest_system_log_level) * 1e6 / p.GB
    )
    return (
        p.TRAFFIC_PER_MILLION[bill.endpoint]
        - p.SWEEPER_SHARE_PER_MILLION
        + extra_logs * p.LOGS_INGEST_GB.usd
        + memory_difference_per_million(bill.memory_mb)
    )


def traffic_per_month(bill: SetBill, webhooks: int) -> float:
    """Traffic's share of a month, with the custom metrics any traffic brings."""
    metrics = len(p.TRAFFIC_METRICS) * p.CUSTOM_METRIC_MONTH.usd if webhooks else 0.0
    return webhooks / 1e6 * traffic_per_million(bill) + metrics


def goal_text(name: str, monthly: float) -> str:
    goal = GOALS.get(name)
    if goal is None:
        return "no goal"
    if monthly <= goal:
        return f"goal ≤ ${goal:.0f}: met, ${goal - monthly:.2f} under"
    return f"goal ≤ ${goal:.0f}: **missed by ${monthly - goal:.2f}**"


def set_table(name: str, lines: list[Line]) -> list[str]:
    monthly = total(lines)
    out = [
        f"### {TITLES.get(name, name)}: ${monthly:.2f} a month ({goal_text(name, monthly)})",
        "",
        "| resource | quantity | unit price (USD) | USD a month |",
        "|---|---:|---:|---:|",
    ]
    for line in lines:
        mark = " *" if line.estimate else ""
        quantity = f"{_number(line.quantity)}{mark} {line.price.unit}"
        out.append(
            f"| {line.resource} | {quantity} | {_unit_price(line.price)} | {line.monthly:.2f} |"
        )
    out.append(f"| **total at rest** | | | **{monthly:.2f}** |")
    goal = GOALS.get(name)
    if goal is not None and monthly > goal:
        out += ["", _largest(lines, monthly - goal)]
    if name in NOTES:
        out += ["", NOTES[name]]
    return out


def _largest(lines: list[Line], gap: float) -> str:
    top = sorted(lines, key=lambda line: line.monthly, reverse=True)[:4]
    listed = "; ".join(f"{line.resource} ${line.monthly:.2f}" for line in top)
    return (
        f"The ${gap:.2f} over the goal, against the largest lines: {listed}. Custom metrics are"
        " prorated by the hour and metered only when sent (CloudWatch pricing), so a metric"
        " published only when non-zero costs nothing while the stack is idle (the zeros above)."
    )


def render(sets: dict[str, SetBill]) -> str:
    """The at-rest section of docs/costs.md for ``{set name: its bill}``."""
    out = [
        BEGIN,
        "## At rest: the bill before the first webhook",
        "",
        f"Counted from template.yaml by `{COMMAND}` (bench/cost_at_rest.py): SAM's own"
        " translation of the template, resolved for each samconfig.toml environment, every"
        " resource that bills by the hour or month priced at us-east-1 list prices taken"
        f" {p.PRICES_TAKEN}, without the free tier (an account's free tier is shared with"
        " whatever else it runs). `*` marks an estimate (see the list below). A resource type"
        " the script can neither price nor knows to be free fails"
        " tests/unit/infra/test_cost_at_rest.py, which also checks that this section is the"
        " script's output.",
        "",
    ]
    for name, bill in sets.items():
        out += [*set_table(name, bill.lines), ""]
    out += [
        "### A month with traffic",
        "",
        "| parameter set (endpoint) | at rest | 10 k webhooks | 1 M webhooks | 100 M webhooks |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, bill in sets.items():
        rest = total(bill.lines)
        cells = [f"{rest + traffic_per_month(bill, v):,.2f}" for v in VOLUMES]
        out.append(
            f"| `{name}` ({bill.endpoint}, SystemLogLevel {bill.system_log_level}, ingest's"
            f" {bill.ingest_system_log_level}, memory"
            f" {bill.memory_mb['IngestMemorySize']}/{bill.memory_mb['ProcessorMemorySize']} MB)"
            f"{' †' if name in AWAKE_WITH_TRAFFIC else ''}"
            f" | {rest:.2f}"
            f" | {' | '.join(cells)} |"
        )
    out += [
        "",
        f"Traffic is the per-million figure above (`python -m bench.cost`, run of {p.TRAFFIC_RUN}:"
        f" ${p.TRAFFIC_PER_MILLION['HttpApi']} behind the HTTP API,"
        f" ${p.TRAFFIC_PER_MILLION['FunctionUrl']} behind a Function URL) less the sweeper's"
        f" share in it (${p.SWEEPER_SHARE_PER_MILLION}, counted at rest here), plus or minus"
        " Lambda's platform.start and platform.report lines where the set's"
        " `IngestSystemLogLevel` or `SystemLogLevel` (the processor's) differs from that run's"
        f" ({' and '.join(p.TRAFFIC_MEASURED_LEVELS)}: ingest's invocation and a tenth of the"
        " processor's per webhook, rendered by bench/cost_bill.py at that run's durations), plus or"
        " minus what the set's ingest/processor memory sizes change in that run's GB-seconds"
        " (its memory table; the run had"
        f" {'/'.join(str(v) for v in p.TRAFFIC_MEASURED_MEMORY.values())} MB), plus the custom"
        f" metrics any traffic brings ({', '.join(p.TRAFFIC_METRICS)}: one provider,"
        f" ${p.CUSTOM_METRIC_MONTH.usd:.2f} each). Not included: the outbox's PutEvents ($1.00"
        " per million messages your handlers emit), interface endpoints' data processing"
        " where the set has endpoints, KMS and Secrets Manager requests at cold starts (within"
        " their free tiers at these volumes), the providers registry's re-read while ingest is"
        " warm (one GetSecretValue and the KMS Decrypt behind it per warm execution environment"
        " every 30 s: at most 86,400 of each a month, $0.69, for an environment warm all month;"
        " nothing at rest), and a larger database class that 100 M webhooks a month (38 a"
        " second on average) may need.",
    ]
    out += [f"\n† {AWAKE_WITH_TRAFFIC[name]}" for name in sets if name in AWAKE_WITH_TRAFFIC]
    out += [
        "",
        "### Prices and estimates",
        "",
    ]
    out += [f"- {line}" for line in _sources(sets)]
    out += [
        f"- The sweeper's billed duration: {p.SWEEPER_BILLED_MS_BY_MEMORY} ms by memory size,"
        " measured on an idle database by `python -m bench.sweeper_at_rest` (the real handler,"
        " PostgreSQL 1 ms and AWS 10 ms away); its lines are rendered by its own code for a run"
        " that found nothing to do (bench/idle_sweep.py; `bench.sweeper_at_rest` prints both, and"
        " they agreed byte for byte), plus Lambda's platform lines at the set's `SystemLogLevel`.",
        f"- Empty receives: {p.ESM_IDLE_POLLERS} pollers with `MaximumConcurrency` set (Lambda"
        ' developer guide, "Configuring scaling behavior for SQS event source mappings": at'
        " low traffic five, as few as two only without maximum concurrency), each a"
        f" {p.ESM_LONG_POLL_SECONDS} s long poll (assumed: AWS does not publish the pollers'"
        " wait).",
        f"- RDS Enhanced Monitoring: {p.ENHANCED_MONITORING_BYTES_PER_SAMPLE:,} B a sample"
        f" (estimate), kept {p.ENHANCED_MONITORING_RETENTION_DAYS} days; the postgresql log"
        f" export {p.RDS_LOG_EXPORT_BYTES_PER_MONTH / 1e6:g} MB a month (estimate). Log"
        " storage is priced on uncompressed bytes (an upper bound).",
        END,
    ]
    return "\n".join(out) + "\n"


def _sources(sets: dict[str, SetBill]) -> list[str]:
    seen: dict[str, Price] = {}
    for bill in sets.values():
        for line in bill.lines:
            seen.setdefault(f"{line.price.source}|{line.price.unit}", line.price)
    return [
        f"{_price_text(price)}: {price.source}" + (" (estimate)" if price.estimate else "")
        for price in seen.values()
    ]


def _price_text(price: Price) -> str:
    if 0 < price.usd < 0.001:
        return f"${price.usd * 1e6:g} per million ({price.unit})"
    return f"${price.usd:g} per {price.unit}"


def render_summary(sets: dict[str, SetBill]) -> str:
    """The lead of docs/costs.md: each named set's bill at rest and per million webhooks."""
    out = [
        SUMMARY[0],
        "| configuration | at rest, a month | plus, per million webhooks | deploy with |",
        "|---|---:|---:|---|",
    ]
    for name, bill in sets.items():
        function_url = traffic_per_million(replace(bill, endpoint="FunctionUrl"))
        http_api = traffic_per_million(replace(bill, endpoint="HttpApi"))
        command = "sam deploy --guided" if name == "default" else f"sam deploy --config-env {name}"
        out.append(
            f"| `{name}`: {SUMMARIES.get(name, '')} | **${total(bill.lines):.2f}** |"
            f" **${http_api:.2f}** (HTTP API) / ${function_url:.2f} (Function URL) |"
            f" `{command}` |"
        )
    out += [
        "",
        "At us-east-1 list prices. At rest: everything billed by the hour or month whatever the"
        " traffic, counted from template.yaml ([the tables below](#at-rest-the-bill-before-the-"
        "first-webhook)). Per million: the endpoint, the functions, SQS and their logs, measured"
        " by `python -m bench.cost` with 1 % cold starts, batches of ten and each set's memory and"
        " log level (the [table below](#per-million-webhooks) and docs/benchmarks.md). Both are"
        f" rendered by `{COMMAND}`.",
        SUMMARY[1],
        "",
    ]
    return "\n".join(out)


def write_doc(section: str, doc: Path, markers: tuple[str, str] = (BEGIN, END)) -> None:
    text = doc.read_text()
    pattern = re.compile(re.escape(markers[0]) + ".*?" + re.escape(markers[1]) + "\n", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)


def doc_section(doc: Path, markers: tuple[str, str] = (BEGIN, END)) -> str:
    pattern = re.escape(markers[0]) + ".*?" + re.escape(markers[1]) + "\n"
    match = re.search(pattern, doc.read_text(), re.DOTALL)
    return match.group(0) if match else ""
