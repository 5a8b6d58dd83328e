"""What CloudWatch makes of the functions' lines: a model of Lambda's JSON log-level filter, the
metrics the template's metric filters and EMF derive from the lines that pass it, the template's
alarms evaluated over those metrics, and the Logs Insights ``filter`` clauses the RUNBOOK uses.

Each piece models only what the template and the RUNBOOK use, and raises on anything else, so
a new alarm shape or query needs this model (and its test) to learn it first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.infra_support import Resolver, load_template, metric_filters, parameter_values

STACK = "webhook-inbox"  # the service dimension: POWERTOOLS_SERVICE_NAME / ${AWS::StackName}
# Minute 0 of a timeline, unless a scenario says otherwise: a Wednesday noon (UTC), outside the
# default maintenance window (Sunday 04:00).
WEEKDAY_NOON = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

# --- Lambda's JSON log-level filter -----------------------------------------------------------

# Lambda's levels, least to most severe ("Log-level filtering", Lambda developer guide).
LAMBDA_LEVELS = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")
# Python's, which Powertools writes as each line's "level" and filters on before writing.
PYTHON_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}
# Lambda's own lines (JSON format) and their level: the ones a function writes per invocation.
SYSTEM_LEVELS = {"platform.start": "INFO", "platform.report": "INFO"}


def lambda_level(line: Mapping[str, Any]) -> str:
    """The level Lambda reads from an application line: ``level`` (our Powertools lines), else
    ``log_level`` (the runtime's own line for an uncaught exception). A value outside Lambda's
    six (Powertools' ``WARNING``, ``CRITICAL``) or none at all counts as INFO."""
    raw = line.get("level", line.get("log_level"))
    level = str(raw).upper() if raw is not None else "INFO"
    return level if level in LAMBDA_LEVELS else "INFO"


def _at_least(level: str, floor: str) -> bool:
    return LAMBDA_LEVELS.index(level) >= LAMBDA_LEVELS.index(floor)


def reaches_cloudwatch(
    line: Mapping[str, Any], *, log_level: str, application_level: str, system_level: str
) -> bool:
    """Whether a line the function (or Lambda) produced reaches its log group.

    ``log_level`` is POWERTOOLS_LOG_LEVEL (Powertools drops a record below it before writing);
    ``application_level`` and ``system_level`` are the function's LoggingConfig.
    """
    kind = line.get("type")
    if isinstance(kind, str) and kind.startswith("platform."):
        return _at_least(SYSTEM_LEVELS[kind], system_level)
    # Our Powertools lines: ``level``, or for an INFO line none but its timestamp (the runtime's
    # own lines carry ``log_level`` instead).
    written_by_powertools = "level" in line or ("timestamp" in line and "log_level" not in line)
    python_level = PYTHON_LEVELS[str(line.get("level", "INFO"))]
    if written_by_powertools and python_level < PYTHON_LEVELS[log_level]:
        return False
    return _at_least(lambda_level(line), application_level)


Levels = tuple[str, str, str, str]  # LogLevel, application level, SystemLogLevel, ingest's


def level_combinations() -> list[Levels]:
    """Every (LogLevel, Lambda application level, SystemLogLevel, IngestSystemLogLevel) the
    template allows."""
    template = load_template()
    parameters = template["Parameters"]
    mapping = template["Mappings"]["ApplicationLogLevels"]
    return [
        (log_level, mapping[log_level]["Lambda"], system_level, ingest_level)
        for log_level in parameters["LogLevel"]["AllowedValues"]
        for system_level in parameters["SystemLogLevel"]["AllowedValues"]
        for ingest_level in parameters["IngestSystemLogLevel"]["AllowedValues"]
    ]


# --- lines the platform writes (shapes: the Telemetry API schema the JSON format uses) --------


def platform_report(
    request_id: str, status: str, *, error_type: str | None = None
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "requestId": request_id,
        "metrics": {
            "durationMs": 30000.0,
            "billedDurationMs": 30000,
            "memorySizeMB": 128,
            "maxMemoryUsedMB": 128 if error_type == "Runtime.OutOfMemory" else 80,
        },
        "status": status,
    }
    if error_type:
        record["errorType"] = error_type
    return {"time": "2026-12-01T10:00:00.000Z", "type": "platform.report", "record": record}


def runtime_error_line(request_id: str, error_type: str) -> dict[str, Any]:
    """The Python runtime's line for an exception that escaped the handler (JSON format)."""
    return {
        "timestamp": "2026-12-01T10:00:00Z",
        "log_level": "ERROR",
        "errorMessage": "an example failure",
        "errorType": error_type,
        "requestId": request_id,
        "stackTrace": ['  File "/var/task/app.py", line 1, in handler\n'],
    }


# --- metrics from lines ------------------------------------------------------------------------


@dataclass(frozen=True)
class Datapoint:
    minute: int
    namespace: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    value: float


def _dims(values: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def metrics_of(lines: Iterable[Mapping[str, Any]], log_group: str, minute: int) -> list[Datapoint]:
    """The custom metrics CloudWatch derives from lines in ``log_group``: the template's metric
    filters on that group, and every EMF document (``_aws``) among the lines."""
    filters = [f for f in metric_filters() if f.log_group == log_group]
    found: list[Datapoint] = []
    for line in lines:
        for matched in (f for f in filters if f.matches(line)):
            dims = matched.dimension_values(line)
            found.append(
                Datapoint(minute, matched.namespace, matched.metric, _dims(dims), matched.value)
            )
        for directive in line.get("_aws", {}).get("CloudWatchMetrics", []):
            for metric in directive["Metrics"]:
                for group in directive["Dimensions"]:
                    raw = line[metric["Name"]]
                    for value in raw if isinstance(raw, list) else [raw]:
                        dims = {name: line[name] for name in group}
                        found.append(
                            Datapoint(
                                minute,
                                directive["Namespace"],
                                metric["Name"],
                                _dims(dims),
                                float(value),
                            )
                        )
    return found


def lambda_metric(minute: int, metric: str, function: str, value: float = 1.0) -> Datapoint:
    """An AWS/Lambda metric of one function (the template's ``!Ref Function``)."""
    return Datapoint(minute, "AWS/Lambda", metric, (("FunctionName", function),), value)


# --- the template's alarms -----------------------------------------------------------------

_INSIGHTS = re.compile(
    r"^SELECT (?P<agg>SUM|MAX|MIN)\((?P<metric>\w+)\) FROM (?P<namespace>\w+)"
    r" WHERE (?P<where>.+?)"
    # A multi time series alarm: one contributor per value of the dimension, each with its own
    # state; the alarm is in ALARM while any contributor is. AWS requires the ORDER BY.
    r"(?: GROUP BY (?P<group>\w+) ORDER BY (?P=agg)\(\) (?:ASC|DESC))?$"
)
_EQUALS = re.compile(r"^(\w+) = '([^']*)'$")
_FILL_SUM = re.compile(r"^FILL\(\w+, 0\)(?: \+ FILL\(\w+, 0\))*$")


class _LogicalNames(dict[str, str]):
    """A resource's Ref and GetAtt read as its logical name (``!Ref IngestFunction`` is the
    dimension value "IngestFunction" here): the model matches datapoints by those names."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return key.split(".", 1)[0]


def _resolver(**overrides: str) -> Resolver:
    return Resolver(parameter_values(**overrides), _LogicalNames(), stack_name=STACK)


class Series:
    """One metric stream an alarm reads: its datapoints aggregated per period (``group_by``:
    one stream per value of that dimension, a multi time series query's contributors)."""

    def __init__(
        self, namespace: str, metric: str, stat: str, match: Any, group_by: str | None = None
    ) -> None:
        self.namespace, self.metric, self.stat, self.match = namespace, metric, stat, match
        self.group_by = group_by

    def contributors(self, points: list[Datapoint]) -> list[Series]:
        """This stream, or one per value of its GROUP BY dimension among ``points``."""
        if self.group_by is None:
            return [self]
        key = self.group_by
        values = sorted(
            {
                dict(p.dimensions)[key]
                for p in points
                if p.namespace == self.namespace
                and p.metric == self.metric
                and key in dict(p.dimensions)
                and self.match(dict(p.dimensions))
            }
        )
        return [
            Series(
                self.namespace,
                self.metric,
                self.stat,
                lambda dims, v=v: self.match(dims) and dims.get(key) == v,
            )
            for v in values
        ]

    def value(self, points: list[Datapoint], start: int, period_min: int) -> float | None:
        values = [
            p.value
            for p in points
            if p.namespace == self.namespace
            and p.metric == self.metric
            and start <= p.minute < start + period_min
            and self.match(dict(p.dimensions))
        ]
        if not values:
            return None
        aggregate = {"Sum": sum, "Maximum": max, "SUM": sum, "MAX": max, "MIN": min}[self.stat]
        return aggregate(values)


def _exactly(dimensions: list[dict[str, Any]]) -> Any:
    wanted = {d["Name"]: str(d["Value"]) for d in dimensions}
    return lambda dims: dims == wanted


def _insights(expression: str) -> Series:
    match = _INSIGHTS.match(expression)
    if match is None:
        raise ValueError(f"unsupported query {expression!r}")
    wanted = {}
    for term in match["where"].split(" AND "):
        equals = _EQUALS.match(term.strip())
        if equals is None:
            raise ValueError(f"unsupported condition {term!r}")
        wanted[equals[1]] = equals[2]
    return Series(
        match["namespace"],
        match["metric"],
        match["agg"],
        lambda dims: all(dims.get(k) == v for k, v in wanted.items()),
        group_by=match["group"],
    )


@dataclass
class Alarm:
    name: str  # the AlarmName's suffix after the stack: the RUNBOOK anchor
    series: list[Series]  # summed (FILL(x, 0) + ...), or a single stream
    filled: bool
    period_min: int
    evaluation_periods: int
    datapoints_to_alarm: int
    threshold: float
    greater: bool
    missing_breaches: bool
    # (ISO weekday, hour): metric math reads the value as 0 then (IF(DAY(x) == d && HOUR(x) ==
    # h, 0, x)), the maintenance window's hour; None: no such expression.
    quiet: tuple[int, int] | None = None

    def fires(self, points: list[Datapoint], minutes: int, clock: datetime = WEEKDAY_NOON) -> bool:
        """Whether it reaches ALARM within ``minutes``, minute 0 being ``clock`` (the last
        period counted even when ``minutes`` ends inside it)."""
        n = self.evaluation_periods
        return any(
            any(sum(breaches[i : i + n]) >= self.datapoints_to_alarm for i in range(len(breaches)))
            for breaches in self._breaches(points, minutes, clock)
        )

    def states(
        self, points: list[Datapoint], minutes: int, clock: datetime = WEEKDAY_NOON
    ) -> list[bool]:
        """Whether it is in ALARM at each minute: judged at the end of each complete period,
        on the last ``EvaluationPeriods`` of them; in ALARM while any contributor is."""
        n, period = self.evaluation_periods, self.period_min
        state = [False] * minutes
        for breaches in self._breaches(points, minutes, clock):
            for minute in range(minutes):
                done = (minute + 1) // period  # periods complete at the end of this minute
                window = breaches[max(0, done - n) : done]
                if done and sum(window) >= self.datapoints_to_alarm:
                    state[minute] = True
        return state

    def _breaches(self, points: list[Datapoint], minutes: int, clock: datetime) -> list[list[bool]]:
        """Each period's breach, per contributor (one list for an alarm of one stream)."""
        if self.series[0].group_by is not None:
            (grouped,) = self.series
            return [
                self._contributor_breaches([one], points, minutes, clock)
                for one in grouped.contributors(points)
            ]
        return [self._contributor_breaches(self.series, points, minutes, clock)]

    def _contributor_breaches(
        self, series: list[Series], points: list[Datapoint], minutes: int, clock: datetime
    ) -> list[bool]:
        breaches = []
        for start in range(0, minutes, self.period_min):
            values = [s.value(points, start, self.period_min) for s in series]
            if self.filled:
                value: float | None = sum(v or 0.0 for v in values)
            else:
                value = values[0]
            at = clock + timedelta(minutes=start)
            if value is not None and self.quiet == (at.isoweekday(), at.hour):
                value = 0.0
            if value is None:
                breaches.append(self.missing_breaches)
            else:
                breaches.append(value > self.threshold if self.greater else value < self.threshold)
        return breaches


_RULE_TERM = re.compile(r'^ALARM\("(?P<name>[^"]+)"\)$')


@dataclass
class CompositeAlarm:
    """An AWS::CloudWatch::CompositeAlarm whose rule is ``ALARM("a") OR ALARM("b") ...``: in
    ALARM while any of its alarms is (their states judged on complete periods)."""

    name: str
    children: list[Alarm]

    def fires(self, points: list[Datapoint], minutes: int, clock: datetime = WEEKDAY_NOON) -> bool:
        return any(any(child.states(points, minutes, clock)) for child in self.children)


def _composite(name: str, rule: str, alarms: Mapping[str, Alarm]) -> CompositeAlarm:
    children = []
    for term in rule.split(" OR "):
        found = _RULE_TERM.match(term.strip())
        if found is None:
            raise ValueError(f"{name}: unsupported alarm rule {rule!r}")
        children.append(alarms[found["name"]])
    return CompositeAlarm(name, children)


def template_alarms(**overrides: str) -> dict[str, Alarm | CompositeAlarm]:
    """Every paging alarm of the template, metric or composite (its condition true for the
    parameters: the defaults, then ``overrides``), by its RUNBOOK name."""
    resolver = _resolver(**overrides)
    every = all_metric_alarms(resolver)
    paging: dict[str, Alarm | CompositeAlarm] = {
        name: alarm for name, (alarm, pages) in every.items() if pages
    }
    # A GetAtt reads as the logical name here (_LogicalNames): the rule names the alarms so.
    by_logical = {logical: alarm for logical, (alarm, _) in _by_logical(resolver).items()}
    for resource in load_template()["Resources"].values():
        if resource["Type"] != "AWS::CloudWatch::CompositeAlarm":
            continue
        if "Condition" in resource and not resolver.condition(resource["Condition"]):
            continue
        props = resolver.resolve(resource["Properties"])
        name = props["AlarmName"].removeprefix(f"{STACK}-")
        if props.get("AlarmActions"):
            paging[name] = _composite(name, props["AlarmRule"], by_logical)
    return paging


def all_metric_alarms(resolver: Resolver | None = None) -> dict[str, tuple[Alarm, bool]]:
    """Every AWS::CloudWatch::Alarm by its name, and whether it pages (has actions): one
    without is a deploy's rollback trigger, or a composite alarm's part."""
    return {alarm.name: (alarm, pages) for alarm, pages in _by_logical(resolver).values()}


def _by_logical(resolver: Resolver | None = None) -> dict[str, tuple[Alarm, bool]]:
    resolver = resolver or _resolver()
    alarms: dict[str, tuple[Alarm, bool]] = {}
    for logical, resource in load_template()["Resources"].items():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        if "Condition" in resource and not resolver.condition(resource["Condition"]):
            continue
        props = resolver.resolve(resource["Properties"])
        name = props["AlarmName"].removeprefix(f"{STACK}-")
        series, filled, period, quiet = _series_of(props)
        operator = props["ComparisonOperator"]
        if operator not in {"GreaterThanThreshold", "LessThanThreshold"}:
            raise ValueError(f"{name}: unsupported {operator}")
        if props["TreatMissingData"] not in {"breaching", "notBreaching"}:
            raise ValueError(f"{name}: unsupported TreatMissingData")
        alarms[logical] = (
            Alarm(
                name=name,
                series=series,
                filled=filled,
                period_min=period // 60,
                evaluation_periods=int(props["EvaluationPeriods"]),
                datapoints_to_alarm=int(props.get("DatapointsToAlarm", props["EvaluationPeriods"])),
                threshold=float(props["Threshold"]),
                greater=operator == "GreaterThanThreshold",
                missing_breaches=props["TreatMissingData"] == "breaching",
                quiet=quiet,
            ),
            bool(props.get("AlarmActions")),
        )
    return alarms


_QUIET = re.compile(
    r"^IF\(DAY\((?P<id>\w+)\) == (?P<day>[1-7]) && HOUR\((?P=id)\) == (?P<hour>\d{1,2}), 0,"
    r" (?P=id)\)$"
)


def _series_of(
    props: Mapping[str, Any],
) -> tuple[list[Series], bool, int, tuple[int, int] | None]:
    if "MetricName" in props:
        stream = Series(
            props["Namespace"],
            props["MetricName"],
            props["Statistic"],
            _exactly(props["Dimensions"]),
        )
        return [stream], False, int(props["Period"]), None
    queries = props["Metrics"]
    (returned,) = [q for q in queries if q.get("ReturnData", True)]
    expression = str(returned["Expression"])
    if "MetricStat" not in returned and expression.startswith("SELECT"):
        return [_insights(expression)], False, int(returned["Period"]), None
    quiet = _QUIET.match(expression)
    if not (_FILL_SUM.match(expression) or quiet):
        raise ValueError(f"unsupported expression {expression!r}")
    streams, periods = [], set()
    for query in queries:
        if query is returned:
            continue
        stat = query["MetricStat"]
        metric = stat["Metric"]
        streams.append(
            Series(
                metric["Namespace"],
                metric["MetricName"],
                stat["Stat"],
                _exactly(metric["Dimensions"]),
            )
        )
        periods.add(int(stat["Period"]))
    (period,) = periods
    if quiet:
        (stream,) = streams  # IF(...) over the one metric it names
        return [stream], False, period, (int(quiet["day"]), int(quiet["hour"]))
    return streams, True, period, None


# --- Logs Insights: the filter clauses the RUNBOOK's queries use ---------------------------------

_COMPARISON = re.compile(
    r'^(?P<field>[@\w.]+) (?P<op>=|!=|>) (?:"(?P<text>[^"]*)"|(?P<number>-?\d+(?:\.\d+)?))$'
)
_PRESENT = re.compile(r"^ispresent\((?P<field>[@\w.]+)\)$")


def field_value(line: Mapping[str, Any], dotted: str) -> Any:
    value: Any = line
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _term(term: str, line: Mapping[str, Any]) -> bool:
    present = _PRESENT.match(term)
    if present:
        return field_value(line, present["field"]) is not None
    comparison = _COMPARISON.match(term)
    if comparison is None:
        raise ValueError(f"unsupported filter term {term!r}")
    value = field_value(line, comparison["field"])
    if comparison["number"] is not None:
        wanted: Any = float(comparison["number"])
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        value = float(value)
    else:
        wanted = comparison["text"]
    if comparison["op"] == "=":
        return bool(value == wanted)
    if comparison["op"] == "!=":
        return value is not None and value != wanted
    return value is not None and value > wanted


def filter_matches(condition: str, line: Mapping[str, Any]) -> bool:
    """A ``filter`` clause of ``or``-ed groups of ``and``-ed terms."""
    return any(
        all(_term(term.strip(), line) for term in group.split(" and "))
        for group in condition.split(" or ")
    )


_KEYWORDS = {
    "filter",
    "fields",
    "stats",
    "by",
    "and",
    "or",
    "as",
    "count",
    "max",
    "ispresent",
    "sort",
}


def query_clauses(query: str) -> list[str]:
    return [clause.strip() for clause in query.split("|")]


def query_fields(query: str) -> set[str]:
    """The log fields a query names (not its keywords, functions, literals or aliases)."""
    names: set[str] = set()
    for clause in query_clauses(query):
        text = re.sub(r'"[^"]*"', " ", clause)
        text = re.sub(r"\bas \w+", " ", text)
        for token in re.findall(r"[@A-Za-z_][\w.@]*", text):
            if token not in _KEYWORDS:
                names.add(token)
    return names
