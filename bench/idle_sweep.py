"""The sweeper's run on an idle stack, for ``bench.cost_at_rest``: its billed duration, and the
lines it writes rendered by its own code (the report of a run that found nothing to do, its EMF
counters and per-status backlog documents), so the custom metrics at rest are counted from what
the code emits, not restated.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench import at_rest_prices as p
from bench.at_rest_prices import Line, Unpriced
from tests import infra_support
from webhook_inbox.maintenance import registry_check, secret_check

if TYPE_CHECKING:
    from bench.template_deployment import Deployment

REQUEST_ID = "8f507cfc-5c5a-4a2d-9d2b-6c1a3f0e9b21"  # a request id is 36 characters
PEAK_RSS_MB = 60  # the sweeper's peak RSS in the cost run of 2026-12-01 (docs/benchmarks.md)
LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40}

MetricId = tuple[str, str, frozenset[tuple[str, str]]]  # namespace, name, dimensions


@dataclass(frozen=True)
class IdleSweep:
    function: str
    memory_mb: int
    billed_ms: int
    log_group: str  # the log group resource its lines go to
    retention_days: int
    lines: list[dict[str, Any]]  # every line a run writes, parsed
    log_bytes: int  # a run's bytes, newlines included
    custom_metrics: set[MetricId]
    reads_registry: bool = False  # the providers registry, read once per READ_EVERY_S
    # The idle ledger (IDLE_LEDGER_BUCKET set): a run at rest reads its two objects and leaves
    # the database alone, but for one run every IDLE_MAX_SKIP_SECONDS (the backstop).
    max_skip_s: int | None = None
    # Live secret_arn secrets of the providers configured at deploy (ProvidersConfig), each read
    # once per secret_check.CHECK_EVERY_S; the registry's providers, added later, add theirs.
    provider_secrets: int = 0
    log_class: str = "STANDARD"  # its log group's LogGroupClass


def idle_sweep(d: Deployment, function: str) -> IdleSweep:
    props = d.props(function)
    if not str(props.get("Code", {}).get("S3Key", "")).endswith("functions/sweeper"):
        raise Unpriced(f"{function} runs on a schedule, but only the sweeper's idle run is known")
    memory = int(props.get("MemorySize", 128))
    billed = billed_ms(memory)
    env = {k: str(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()}
    logging_config = props.get("LoggingConfig", {})
    log_group = d.resources[function]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    retention = int(d.props(log_group).get("RetentionInDays", 0) or 0)
    ledger = bool(env.get("IDLE_LEDGER_BUCKET"))
    own = [json.loads(line) for line in render_run(env, billed, skipped=ledger)]
    threshold = LEVELS[env.get("POWERTOOLS_LOG_LEVEL", "INFO").upper()]
    kept = [line for line in own if LEVELS.get(str(line.get("level", "ERROR")), 40) >= threshold]
    from bench.cost_bill import platform_lines

    platform = platform_lines(
        logging_config, duration_ms=billed, memory_mb=memory, used_mb=PEAK_RSS_MB, init_ms=None
    )
    lines = kept + [json.loads(line) for line in platform if line.startswith("{")]
    size = sum(len(json.dumps(line, separators=(",", ":"))) + 1 for line in lines)
    return IdleSweep(
        function,
        memory,
        billed,
        log_group,
        retention or 3653,
        lines,
        size,
        emf_metrics(lines),
        reads_registry=bool(env.get("PROVIDERS_REGISTRY_ARN")),
        provider_secrets=_provider_secrets(env.get("PROVIDERS_CONFIG", "")),
        max_skip_s=int(env.get("IDLE_MAX_SKIP_SECONDS", 86_400)) if ledger else None,
        log_class=str(d.props(log_group).get("LogGroupClass", "STANDARD")),
    )


def _provider_secrets(config_text: str) -> int:
    """The secret_arn secrets the sweeper checks among PROVIDERS_CONFIG's providers."""
    try:
        providers = json.loads(config_text or "{}").get("providers") or {}
    except (ValueError, AttributeError):
        return 0
    return sum(
        "secret_arn" in secret
        for provider in providers.values()
        for secret in provider.get("secrets", [])
        if isinstance(secret, dict)
    )


def billed_ms(memory_mb: int) -> int:
    """The measured billed duration at the largest measured size not above ``memory_mb``."""
    sizes = [m for m in p.SWEEPER_BILLED_MS_BY_MEMORY if m <= memory_mb]
    return p.SWEEPER_BILLED_MS_BY_MEMORY[
        max(sizes) if sizes else min(p.SWEEPER_BILLED_MS_BY_MEMORY)
    ]


def sweep_steps() -> list[str]:
    """The batched steps ``Sweep.run`` takes, in order: what an idle run reports as completed."""
    from webhook_inbox.maintenance.context import BatchedStep
    from webhook_inbox.maintenance.sweeper import STEPS

    return [step.name for step in STEPS if issubclass(step, BatchedStep)]


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def render_run(env: dict[str, str], duration_ms: int, *, skipped: bool = False) -> list[str]:
    """The lines functions/sweeper/app.py writes for a run that found nothing to do: what
    ``emit_metrics`` prints (a document per backlog status), then the one summary line; with
    ``skipped``, the line of a run the idle ledger let leave the database alone (``_skipped``:
    the last quiet run's backlog, re-reported)."""
    from aws_lambda_powertools import Metrics

    from webhook_inbox import observability
    from webhook_inbox.maintenance.metrics import emit_metrics
    from webhook_inbox.maintenance.report import SweepReport
    from webhook_inbox.store.backlog_metrics import BACKLOG_STATUSES, Backlog

    variables = {
        "POWERTOOLS_METRICS_NAMESPACE": env.get("POWERTOOLS_METRICS_NAMESPACE", ""),
        "POWERTOOLS_SERVICE_NAME": env.get("POWERTOOLS_SERVICE_NAME", ""),
        "POWERTOOLS_METRICS_DISABLED": "false",
    }
    report = SweepReport(
        completed_steps=sweep_steps(),
        duration_ms=duration_ms,
        backlog=Backlog(
            event_counts=dict.fromkeys(BACKLOG_STATUSES, 0),
            oldest_unprocessed_age_seconds=0.0,
            outbox_pending=0,
            outbox_dead=0,
            oldest_outbox_age_seconds=0.0,
        ),
    )
    if skipped:  # a skipped run's report has no steps and no duration of its own
        report = SweepReport(backlog=report.backlog)
    out = io.StringIO()
    with _environment(variables), contextlib.redirect_stdout(out):
        logger = observability.lean_logger()
        handler = logger.registered_handler
        previous = handler.setStream(out)  # type: ignore[attr-defined]
        level = logger.log_level
        logger.setLevel("INFO")
        try:
            metrics = Metrics()
            metrics.clear_metrics()
            emit_metrics(report, metrics)
            embedded = observability.embedded_metrics(metrics)
            if skipped:
                fields = {"idle": "idle", "next_due": None, "sweep": report.as_log()}
                logger.info(
                    "sweep skipped: idle", extra={"request_id": REQUEST_ID, **fields, **embedded}
                )
            else:
                logger.info(
                    "sweep finished",
                    extra={"request_id": REQUEST_ID, "sweep": report.as_log(), **embedded},
                )
        finally:
            logger.setLevel(level)
            handler.setStream(previous)  # type: ignore[attr-defined]
    return [line for line in out.getvalue().splitlines() if line.strip()]


def emf_metrics(lines: list[dict[str, Any]]) -> set[MetricId]:
    """Each distinct metric (namespace, name, dimension values) the EMF lines publish."""
    found: set[MetricId] = set()
    for line in lines:
        for directive in line.get("_aws", {}).get("CloudWatchMetrics", []):
            for dimensions in directive["Dimensions"]:
                values = frozenset((k, str(line.get(k))) for k in dimensions)
                for metric in directive["Metrics"]:
                    found.add((directive["Namespace"], metric["Name"], values))
    return found


def zero_valued(lines: list[dict[str, Any]]) -> set[MetricId]:
    """The EMF metrics whose every value in ``lines`` is zero."""
    nonzero: set[MetricId] = set()
    for line in lines:
        for metric in emf_metrics([line]):
            value = line.get(metric[1])
            values = value if isinstance(value, list) else [value]
            if any(v != 0 for v in values):
                nonzero.add(metric)
    return emf_metrics(lines) - nonzero


HOURLY = "rate(1 hour)"
# The hourly deletion-protection check (functions/database_protection): one DescribeDBInstances
# when protection is on, after a cold start most hours (an environment idle for an hour is
# seldom kept). An estimate, not measured: 1 s billed with INIT, its two lines (INFO) and
# Lambda's platform.start and platform.report, about 500 B.
CHECK_BILLED_MS = 1000
CHECK_LOG_BYTES = 500


def hourly_check(d: Deployment, function: str) -> list[Line]:
    """An hourly run of a function that is not the sweeper: only the deletion-protection
    check is known (its RDS and CloudFormation calls bill nothing)."""
    props = d.props(function)
    if not str(props.get("Code", {}).get("S3Key", "")).endswith("functions/database_protection"):
        raise Unpriced(f"{function} runs hourly, but only the deletion-protection check is known")
    runs = p.MINUTES_PER_MONTH // 60
    memory = int(props.get("MemorySize", 128))
    log_group = d.resources[function]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    retention = int(d.props(log_group).get("RetentionInDays", 0) or 0) or 3653
    return [
        Line(f"{function}: {runs} hourly checks", runs, p.LAMBDA_REQUEST),
        Line(
            f"{function}: {memory} MB, about {CHECK_BILLED_MS} ms a check",
            runs * CHECK_BILLED_MS / 1000 * memory / 1024,
            p.LAMBDA_GB_SECOND_ARM,
            estimate=True,
        ),
        Line(f"{function}: schedule events", runs, p.SCHEDULED_EVENT),
        *p.log_lines(
            f"{function} logs (about {CHECK_LOG_BYTES} B a check)",
            runs * CHECK_LOG_BYTES,
            retention,
            estimate=True,
            log_class=str(d.props(log_group).get("LogGroupClass", "STANDARD")),
        ),
    ]


def scheduled_runs(d: Deployment, sweep: Callable[[Deployment, str], IdleSweep]) -> list[Line]:
    """Each scheduled rule's invocations a month, their GB-seconds, the lines they write and the
    custom metrics those lines publish (EMF, and the metric filters they feed)."""
    lines: list[Line] = []
    runs_at_rest: list[IdleSweep] = []
    for name in d.of_type("AWS::Events::Rule"):
        props = d.props(name)
        expression = props.get("ScheduleExpression")
        if expression is None:
            continue  # an event pattern: billed per matching event
        if expression == HOURLY:
            lines += [
                line
                for target in props["Targets"]
                for line in hourly_check(d, target["Arn"].strip("<>").split(".")[0])
            ]
            continue
        if expression != "rate(1 minute)":
            raise Unpriced(f"{name}: rate(1 minute) and {HOURLY} are counted, not {expression}")
        for target in props["Targets"]:
            function = target["Arn"].strip("<>").split(".")[0]
            run = sweep(d, function)
            runs_at_rest.append(run)
            runs = p.MINUTES_PER_MONTH
            lines += [
                Line(f"{function}: {runs:,} scheduled runs", runs, p.LAMBDA_REQUEST),
                Line(
                    f"{function}: {run.memory_mb} MB, {run.billed_ms} ms a run",
                    runs * run.billed_ms / 1000 * run.memory_mb / 1024,
                    p.LAMBDA_GB_SECOND_ARM,
                ),
                Line(f"{function}: schedule events", runs, p.SCHEDULED_EVENT),
            ]
            lines += p.log_lines(
                f"{function} logs ({run.log_bytes:,} B a run)",
                runs * run.log_bytes,
                run.retention_days,
                log_class=run.log_class,
            )
            if run.reads_registry:
                # One read per five minutes while the environment lives, one more per new
                # environment (Lambda replaces them at times it does not publish: not counted).
                reads = runs * 60 // int(registry_check.READ_EVERY_S)
                every = int(registry_check.READ_EVERY_S) // 60
                lines += [
                    Line(
                        f"{function}: providers registry reads, one per {every} minutes",
                        reads,
                        p.SECRETS_API_CALL,
                    ),
                    Line(f"{function}: KMS decrypts of those reads", reads, p.KMS_REQUEST),
                ]
                checks = run.provider_secrets * runs * 60 // int(secret_check.CHECK_EVERY_S)
                lines += [
                    Line(
                        f"{function}: provider secrets' checks, one read each per"
                        f" {int(secret_check.CHECK_EVERY_S) // 60} minutes"
                        f" ({run.provider_secrets} secret_arn in ProvidersConfig; each one"
                        " added later adds its own)",
                        checks,
                        p.SECRETS_API_CALL,
                    ),
                    Line(f"{function}: KMS decrypts of those checks", checks, p.KMS_REQUEST),
                ]
            if run.max_skip_s is not None:
                backstops = p.MINUTES_PER_MONTH * 60 // run.max_skip_s
                lines += [
                    Line(f"{function}: idle ledger reads (2 GETs a run)", 2 * runs, p.S3_GET),
                    Line(
                        f"{function}: {backstops} backstop database runs, one record PUT each",
                        backstops,
                        p.S3_PUT,
                    ),
                ]
            lines.append(
                Line(
                    f"custom metrics: {function}'s EMF at rest ({len(run.custom_metrics)},"
                    f" {len(zero_valued(run.lines))} of them zero)",
                    len(run.custom_metrics),
                    p.CUSTOM_METRIC_MONTH,
                )
            )
    return [*lines, _filter_metrics(d, runs_at_rest)]


def _filter_metrics(d: Deployment, runs: list[IdleSweep]) -> Line:
    """Metrics from metric filters fed at rest: on a log group a scheduled run writes to, the
    filter matches one of its lines or has a DefaultValue (published for every line). Filters on
    the other functions' groups publish only with traffic; one on a group named outside the
    template (RDS's, say) is counted as fed, an upper bound."""
    feeding = {run.log_group: run for run in runs}
    filters = d.of_type("AWS::Logs::MetricFilter")
    found: set[MetricId] = set()
    guessed = False
    for name in filters:
        props = d.resources[name]["Properties"]
        group = props["LogGroupName"]
        target = group.get("Ref") if isinstance(group, dict) else None
        run = feeding.get(target) if target else None
        if target in d.resources and run is None:
            continue  # a group only traffic writes to
        for transformation in props["MetricTransformations"]:
            metric = (transformation["MetricNamespace"], transformation["MetricName"])
            if run is None:
                guessed = True
                found.add((*metric, frozenset()))
                continue
            for line in run.lines:
                if "DefaultValue" in transformation or _matches(props["FilterPattern"], line):
                    dims = {
                        k: str(line.get(v.removeprefix("$."))) for k, v in _dims(transformation)
                    }
                    found.add((*metric, frozenset(dims.items())))
    return Line(
        f"custom metrics: metric filters at rest ({len(found)} from {len(filters)} filters)",
        len(found),
        p.CUSTOM_METRIC_MONTH,
        estimate=guessed,
    )


def _dims(transformation: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["Key"], d["Value"]) for d in transformation.get("Dimensions", [])]


def _matches(pattern: str, line: dict[str, Any]) -> bool:
    """Whether a filter pattern matches a line: JSON patterns as infra_support evaluates them,
    term patterns ("a b", "?a ?b", "-a") on the line's text; anything else counts as a match
    (an upper bound)."""
    if not pattern.strip().startswith(("{", "[")):
        text = json.dumps(line, separators=(",", ":"))
        terms = [t.strip('"') for t in pattern.split()]
        if any(t.startswith("?") for t in terms):
            return any(t.lstrip("?") in text for t in terms)
        return all((t[1:] not in text) if t.startswith("-") else (t in text) for t in terms)
    try:
        return infra_support.filter_pattern_matches(pattern, line)
    except ValueError:
        return True
