"""bench.cost's bill: list prices and the workload's assumptions, the Lambda runtime's own log
lines and the HTTP API's access log line, what a tree's template deploys (:class:`Deployment`),
and the measured functions priced per million webhooks (:func:`bill`).
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cost_child import ROOT
from bench.cost_rig import FUNCTIONS, Measured
from bench.memory_sizing import billed_ms

SCHEDULED_RUNS_PER_MONTH = 60 * 24 * 30  # rate(1 minute)


# --- prices and assumptions -------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """us-east-1 list prices (the pricing pages of each service; first tier, no free tier)."""

    logs_per_gb: float = 0.50  # CloudWatch Logs, standard class, ingestion per GB
    logs_ia_per_gb: float = 0.25  # CloudWatch Logs, Infrequent Access class, ingestion per GB
    gb_bytes: float = 1e9  # the pricing pages' GB
    http_api_per_million: float = 1.00  # HTTP API, first 300 million requests a month
    function_url_per_million: float = 0.0  # Function URLs: no charge beyond the invocation
    lambda_requests_per_million: float = 0.20
    lambda_gb_second_arm: float = 0.0000133334  # arm64, first 7.5 billion GB-s a month
    sqs_per_million: float = 0.40  # standard queue, per request (per 64 KB chunk)
    eventbridge_per_million: float = 1.00  # PutEvents, custom events (per 64 KB chunk)


@dataclass(frozen=True)
class Workload:
    batch_size: int = 10
    cold_start_rate: float = 0.01  # share of invocations that start a new environment
    webhooks_per_month: float = 10_000_000  # spreads the sweeper's fixed monthly cost
    outbox_messages_per_webhook: float = 1.0
    event_overhead_bytes: int = 0  # per log event, beyond its text (see docs/benchmarks.md)


# --- the Lambda runtime's own lines ---------------------------------------------------------

_REQUEST_ID = "8f507cfc-5c5a-4a2d-9d2b-6c1a3f0e9b21"  # every request id is 36 characters
_TIME = "2026-11-30T10:00:00.123Z"


def platform_lines(
    logging_config: dict[str, Any],
    *,
    duration_ms: float,
    memory_mb: int,
    used_mb: int,
    init_ms: float | None,
) -> list[str]:
    """The runtime's lines for one invocation, as CloudWatch receives them.

    Text format (Lambda's default): START, END and REPORT, in the shapes Lambda's developer guide
    shows ("Using the Lambda console"/"Python logging" examples). JSON format: ``platform.start``
    and ``platform.report`` records (the Telemetry API schema the JSON format uses), sent at
    SystemLogLevel INFO or DEBUG and not at WARN: "By default, Lambda sets the system log level
    to INFO. With this setting, Lambda automatically sends "start" and "report" log messages"
    (Lambda developer guide, "Log-level filtering").
    """
    billed = math.ceil(duration_ms)
    if str(logging_config.get("LogFormat", "Text")).upper() != "JSON":
        report = (
            f"REPORT RequestId: {_REQUEST_ID}\tDuration: {duration_ms:.2f} ms\tBilled Duration:"
            f" {billed} ms\tMemory Size: {memory_mb} MB\tMax Memory Used: {used_mb} MB\t"
        )
        if init_ms is not None:
            report += f"Init Duration: {init_ms:.2f} ms\t"
        return [
            f"START RequestId: {_REQUEST_ID} Version: $LATEST",
            f"END RequestId: {_REQUEST_ID}",
            report,
        ]
    if str(logging_config.get("SystemLogLevel", "INFO")).upper() == "WARN":
        return []
    metrics: dict[str, Any] = {
        "durationMs": round(duration_ms, 3),
        "billedDurationMs": billed,
        "memorySizeMB": memory_mb,
        "maxMemoryUsedMB": used_mb,
    }
    if init_ms is not None:
        metrics["initDurationMs"] = round(init_ms, 3)
    start = {
        "time": _TIME,
        "type": "platform.start",
        "record": {"requestId": _REQUEST_ID, "version": "$LATEST"},
    }
    report_record = {
        "time": _TIME,
        "type": "platform.report",
        "record": {"requestId": _REQUEST_ID, "metrics": metrics, "status": "success"},
    }
    return [
        json.dumps(start, separators=(",", ":")),
        json.dumps(report_record, separators=(",", ":")),
    ]


def access_log_line(format_text: str, samples: dict[str, str]) -> str:
    """An HTTP API access log line: ``$context.x`` variables replaced by sample values."""
    text = " ".join(format_text.split()).replace("\n", "")
    return re.sub(r"\$context\.[A-Za-z.]+", lambda m: samples.get(m.group(0), "-"), text)


# --- reading a tree's template ------------------------------------------------------------------


def template_of(tree: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    import yaml

    from tests.infra_support import _CfnLoader

    loaded: dict[str, Any] = yaml.load((tree / "template.yaml").read_text(), Loader=_CfnLoader)  # noqa: S506
    return loaded


def _value(node: Any, parameters: dict[str, Any]) -> Any:
    """A template value with ``!Ref Parameter`` (and ``!FindInMap`` on a parameter) resolved to
    the parameter's default."""
    if isinstance(node, dict) and "Ref" in node and node["Ref"] in parameters:
        return parameters[node["Ref"]].get("Default")
    return node


@dataclass
class Deployment:
    """What a tree's template deploys with its defaults, as far as the bill is concerned."""

    memory_mb: dict[str, int]
    logging: dict[str, dict[str, Any]]
    access_log_format: str | None
    # Each log group's class (STANDARD or INFREQUENT_ACCESS), by function and "access".
    log_class: dict[str, str] = field(default_factory=dict)

    def logs_price(self, group: str, prices: Prices) -> float:
        """USD per GB ingested into ``group``'s log group, by its class."""
        ia = self.log_class.get(group) == "INFREQUENT_ACCESS"
        return prices.logs_ia_per_gb if ia else prices.logs_per_gb

    @classmethod
    def of(cls, tree: Path) -> Deployment:
        template = template_of(tree)
        parameters = template.get("Parameters", {})
        globals_ = template.get("Globals", {}).get("Function", {})
        names = {
            "ingest": "IngestFunction",
            "processor": "ProcessorFunction",
            "sweeper": "SweeperFunction",
        }
        resources = template["Resources"]

        def group_class(group: Any) -> str:
            if isinstance(group, dict) and group.get("Ref") in resources:
                props = resources[group["Ref"]].get("Properties", {})
                return str(props.get("LogGroupClass", "STANDARD"))
            return "STANDARD"

        memory, logging_, classes = {}, {}, {}
        for function, resource in names.items():
            props = resources[resource]["Properties"]
            memory[function] = int(
                _value(props.get("MemorySize", globals_.get("MemorySize", 128)), parameters)
            )
            config = {**globals_.get("LoggingConfig", {}), **props.get("LoggingConfig", {})}
            logging_[function] = {k: _value(v, parameters) for k, v in config.items()}
            classes[function] = group_class(config.get("LogGroup"))
        api = resources.get("HttpApi", {}).get("Properties", {})
        settings = api.get("AccessLogSettings", {})
        access = settings.get("Format")
        destination = settings.get("DestinationArn")
        if isinstance(destination, dict) and "Fn::GetAtt" in destination:
            classes["access"] = group_class({"Ref": destination["Fn::GetAtt"][0]})
        return cls(memory, logging_, access, classes)


# --- the bill ----------------------------------------------------------------------------------


@dataclass
class FunctionBill:
    invocations_per_webhook: float
    gb_seconds: float  # per invocation, INIT share included
    log_bytes: float  # per invocation: the function's own output plus the runtime's lines
    own_bytes: float
    platform_bytes: float
    log_events: float


def function_bill(
    m: Measured,
    *,
    memory_mb: int,
    logging_config: dict[str, Any],
    per_webhook: float,
    workload: Workload,
) -> FunctionBill:
    billed = [billed_ms(w, c, memory_mb) for w, c in zip(m.wall_ms, m.cpu_ms, strict=True)]
    # The sweeper's first run after the mix publishes the whole outbox at once; a scheduled run
    # in the steady state finds a minute's worth: take its median run, not the mean.
    typical = statistics.median if per_webhook < 1 / workload.batch_size else statistics.mean
    init_ms = statistics.median(
        billed_ms(w, c, memory_mb) for w, c in zip(m.init_wall_ms, m.init_cpu_ms, strict=True)
    )
    gb = memory_mb / 1024
    gb_seconds = typical(billed) / 1000 * gb + workload.cold_start_rate * init_ms / 1000 * gb
    used = math.ceil(statistics.median(m.peak_rss_mb))
    warm = platform_lines(
        logging_config,
        duration_ms=statistics.median(m.wall_ms),
        memory_mb=memory_mb,
        used_mb=used,
        init_ms=None,
    )
    cold = platform_lines(
        logging_config,
        duration_ms=statistics.median(m.wall_ms),
        memory_mb=memory_mb,
        used_mb=used,
        init_ms=init_ms,
    )
    rate = workload.cold_start_rate
    platform = (1 - rate) * sum(len(s) + 1 for s in warm) + rate * sum(len(s) + 1 for s in cold)
    own = typical(m.bytes)
    events = typical(m.line_counts) + len(warm)
    return FunctionBill(per_webhook, gb_seconds, own + platform, own, platform, events)


@dataclass
class Bill:
    """USD per million webhooks, by item."""

    items: dict[str, float]
    floor_items: tuple[str, ...]
    log_bytes_per_webhook: float
    log_bytes_by_function: dict[str, float]

    @property
    def total(self) -> float:
        return sum(v for k, v in self.items.items() if not k.startswith("outbox"))

    @property
    def floor(self) -> float:
        return sum(self.items[k] for k in self.floor_items)


def bill(  # noqa: PLR0917 - one bill, all its inputs
    measured: dict[str, Measured],
    deployment: Deployment,
    endpoint: str,
    prices: Prices,
    workload: Workload,
    ingest_p50_ms: float,
) -> Bill:
    per_webhook = per_webhook_invocations(workload)
    # A webhook's ingest count includes its share of duplicate deliveries: per stored event.
    bills = {
        f: function_bill(
            measured[f],
            memory_mb=deployment.memory_mb[f],
            logging_config=deployment.logging[f],
            per_webhook=per_webhook[f],
            workload=workload,
        )
        for f in FUNCTIONS
    }
    million = 1e6
    items: dict[str, float] = {}
    if endpoint == "HttpApi":
        items["endpoint: HTTP API requests"] = prices.http_api_per_million
    else:
        items["endpoint: Function URL"] = prices.function_url_per_million
    items["Lambda requests"] = (
        sum(b.invocations_per_webhook for b in bills.values()) * prices.lambda_requests_per_million
    )
    # SendMessage per webhook; the event source mapping's ReceiveMessage and DeleteMessageBatch
    # once per batch (each well under 64 KB: one request each).
    items["SQS requests"] = (1 + 2 / workload.batch_size) * prices.sqs_per_million
    items["Lambda GB-seconds (incl. billed INIT)"] = (
        sum(b.invocations_per_webhook * b.gb_seconds for b in bills.values())
        * prices.lambda_gb_second_arm
        * million
    )
    log_bytes = {
        f: b.invocations_per_webhook * (b.log_bytes + b.log_events * workload.event_overhead_bytes)
        for f, b in bills.items()
    }
    items["CloudWatch Logs: functions"] = sum(
        n / prices.gb_bytes * deployment.logs_price(f, prices) * million
        for f, n in log_bytes.items()
    )
    if endpoint == "HttpApi" and deployment.access_log_format:
        line = access_log_line(deployment.access_log_format, _access_samples(ingest_p50_ms))
        access = len(line) + 1 + workload.event_overhead_bytes
        items["CloudWatch Logs: API access log"] = (
            access / prices.gb_bytes * deployment.logs_price("access", prices) * million
        )
    items["outbox: EventBridge PutEvents"] = (
        workload.outbox_messages_per_webhook * prices.eventbridge_per_million
    )
    floor = ("Lambda requests", "SQS requests", next(k for k in items if k.startswith("endpoint")))
    return Bill(items, floor, sum(log_bytes.values()), log_bytes)


def _access_samples(latency_ms: float) -> dict[str, str]:
    return {
        "$context.requestId": "Jx5OxjPUoAMEVxA=",
        "$context.identity.sourceIp": "203.0.113.10",
        "$context.requestTime": "30/Nov/2026:10:00:00 +0000",
        "$context.routeKey": "POST /webhooks/{provider}",
        "$context.path": "/webhooks/stripe",
        "$context.status": "202",
        "$context.protocol": "HTTP/1.1",
        "$context.responseLength": "22",
        "$context.responseLatency": str(round(latency_ms + 2)),
        "$context.integrationStatus": "202",
        "$context.integrationLatency": str(round(latency_ms)),
        "$context.integration.error": "-",
        "$context.integrationErrorMessage": "-",
    }


def per_webhook_invocations(workload: Workload) -> dict[str, float]:
    """Invocations per webhook: ingest per delivery, the processor per batch, the sweeper's
    minute spread over the month's webhooks."""
    return {
        "ingest": 1.0,
        "processor": 1 / workload.batch_size,
        "sweeper": SCHEDULED_RUNS_PER_MONTH / workload.webhooks_per_month,
    }
