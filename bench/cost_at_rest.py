"""What the stack costs a month before its first webhook, counted from template.yaml.

    python -m bench.cost_at_rest [--config-env default small aurora-paused]
                                 [--parameter-overrides K=V ...]
                                 [--write]

template.yaml is translated by SAM's own translator (offline, as the infra tests do), resolved
for a parameter set (the template's defaults, then a samconfig.toml environment's
``parameter_overrides``, then ``--parameter-overrides``), and every resource that bills by the
hour or the month whatever the traffic is priced: the database instance and its storage (or
the Aurora cluster's volume and its instances' hours or Serverless v2 minimum capacity), RDS
Proxy, interface endpoints per AZ, NAT gateways and public addresses, KMS keys, secrets (the
RDS-managed one too), alarms by kind, dashboards, custom metrics (the EMF the idle sweeper
writes, rendered by the sweeper's own code, and metric filters that match it), the schedule's
invocations, the event source mapping's polling of an empty queue, and the log bytes all that
writes. A resource type that is neither priced here nor listed in :data:`FREE_TYPES` stops the
script (and fails tests/unit/infra/test_cost_at_rest.py). Prices: :mod:`bench.at_rest_prices`.
``--write`` rewrites the at-rest section of docs/costs.md (the test checks it matches).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import at_rest_prices as p  # noqa: E402
from bench import memory_sizing  # noqa: E402
from bench.at_rest_prices import Line, Price, Unpriced  # noqa: E402
from bench.at_rest_report import SUMMARY, SetBill, render, render_summary, write_doc  # noqa: E402
from bench.idle_sweep import idle_sweep, scheduled_runs  # noqa: E402
from bench.template_deployment import Deployment, deployment  # noqa: E402

COSTS_DOC = ROOT / "docs" / "costs.md"
# The samconfig.toml environments docs/costs.md documents, in its order.
DOCUMENTED = ("default", "small", "aurora-paused")


# --- pricing, one function per billed resource type --------------------------------------


def _database(d: Deployment, name: str) -> list[Line]:
    props = d.props(name)
    if "DBClusterIdentifier" in props:
        return _aurora_instance(d, name, props)
    cls = str(props["DBInstanceClass"])
    if cls not in p.RDS_INSTANCE_HOURLY:
        raise Unpriced(f"{name}: no price for {cls} in bench/at_rest_prices.py")
    multi_az = str(props.get("MultiAZ", "false")).lower() == "true"
    copies = p.RDS_MULTI_AZ_FACTOR if multi_az else 1
    storage = int(props["AllocatedStorage"])
    if str(props.get("StorageType", "gp2")) != "gp3":
        raise Unpriced(f"{name}: only gp3 storage is priced")
    where = "Multi-AZ" if multi_az else "Single-AZ"
    lines = [
        Line(f"RDS {cls}, {where}", copies * p.HOURS_PER_MONTH, p.RDS_INSTANCE_HOURLY[cls]),
        Line(f"RDS gp3 storage, {storage} GB, {where}", copies * storage, p.RDS_GP3_GB_MONTH),
        # An idle database's backups (7 days of a nearly empty volume) stay within the free
        # allowance of 100 % of the provisioned storage.
        Line(
            f"RDS backups ({props.get('BackupRetentionPeriod', 1)} days)", 0, p.RDS_BACKUP_GB_MONTH
        ),
    ]
    if str(props.get("ManageMasterUserPassword", "false")).lower() == "true":
        lines.append(Line("Secrets Manager: the RDS-managed master secret", 1, p.SECRET_MONTH))
    return lines + _monitoring(props) + _log_export(d, props)


def _monitoring(props: Mapping[str, Any]) -> list[Line]:
    interval = int(props.get("MonitoringInterval", 0) or 0)
    if not interval:
        return []
    samples = p.MINUTES_PER_MONTH * 60 / interval
    return p.log_lines(
        f"RDS Enhanced Monitoring ({interval} s)",
        samples * p.ENHANCED_MONITORING_BYTES_PER_SAMPLE,
        p.ENHANCED_MONITORING_RETENTION_DAYS,
        estimate=True,
    )


def _log_export(d: Deployment, props: Mapping[str, Any]) -> list[Line]:
    if not props.get("EnableCloudwatchLogsExports"):
        return []
    retention = int(d.parameters.get("LogRetentionDays") or 30)
    return p.log_lines(
        "RDS log export (postgresql)", p.RDS_LOG_EXPORT_BYTES_PER_MONTH, retention, estimate=True
    )


def _cluster_of(d: Deployment, instance: str) -> str:
    return str(d.resources[instance]["Properties"]["DBClusterIdentifier"]["Ref"])


def _min_capacity(d: Deployment, cluster: str) -> float:
    return float(d.props(cluster)["ServerlessV2ScalingConfiguration"]["MinCapacity"])


def _backstop_runs(d: Deployment) -> int:
    """The sweeper's database runs a month at rest: one per IDLE_MAX_SKIP_SECONDS when it reads
    the idle ledger (0 without it: then every run connects and nothing pauses)."""
    for name in d.of_type("AWS::Lambda::Function"):
        env = (d.props(name).get("Environment") or {}).get("Variables") or {}
        if env.get("IDLE_LEDGER_BUCKET") and "IDLE_MAX_SKIP_SECONDS" in env:
            return p.MINUTES_PER_MONTH * 60 // int(env["IDLE_MAX_SKIP_SECONDS"])
    return 0


def _aurora_instance(d: Deployment, name: str, props: Mapping[str, Any]) -> list[Line]:
    """An instance of an Aurora cluster: its class's hours, or Serverless v2's minimum capacity
    (nothing at 0: it pauses once nothing connects; its storage is the cluster's)."""
    cls = str(props["DBInstanceClass"])
    if cls == "db.serverless":
        cluster = _cluster_of(d, name)
        minimum = _min_capacity(d, cluster)
        if minimum == 0:
            scaling = d.props(cluster)["ServerlessV2ScalingConfiguration"]
            pause = int(scaling["SecondsUntilAutoPause"])
            what = f"paused (0 ACUs) once nothing has connected for {pause:,} s"
            line = Line(f"Aurora Serverless v2 {name}: {what}", 0, p.AURORA_ACU_HOUR)
            wakes = _backstop_runs(d)
            if wakes:
                awake_h = wakes * (pause + p.AURORA_WAKE_OVERHEAD_S) / 3600
                woken = Line(
                    f"Aurora Serverless v2 {name}: woken by the sweeper's {wakes} backstop runs,"
                    f" {p.AURORA_AWAKE_MIN_ACUS:g} ACU for {pause + p.AURORA_WAKE_OVERHEAD_S:,} s"
                    " each",
                    awake_h * p.AURORA_AWAKE_MIN_ACUS,
                    p.AURORA_ACU_HOUR,
                    estimate=True,
                )
                return [line, woken, *_monitoring(props)]
        else:
            what = f"{minimum:g} ACUs, its minimum"
            line = Line(
                f"Aurora Serverless v2 {name}: {what}",
                minimum * p.HOURS_PER_MONTH,
                p.AURORA_ACU_HOUR,
            )
        return [line, *_monitoring(props)]
    if cls not in p.AURORA_INSTANCE_HOURLY:
        raise Unpriced(f"{name}: no Aurora price for {cls} in bench/at_rest_prices.py")
    hours = Line(f"Aurora {cls} {name}", p.HOURS_PER_MONTH, p.AURORA_INSTANCE_HOURLY[cls])
    return [hours, *_monitoring(props)]


def _cluster(d: Deployment, name: str) -> list[Line]:
    """An Aurora cluster's own charges: its volume, backups, master secret and log export."""
    props = d.props(name)
    if str(props.get("StorageType", "aurora")) != "aurora":
        raise Unpriced(f"{name}: only Aurora Standard storage is priced")
    retention = props.get("BackupRetentionPeriod", 1)
    lines = [
        Line(
            "Aurora storage (Standard): the volume of an empty cluster",
            p.AURORA_IDLE_VOLUME_GB,
            p.AURORA_STORAGE_GB_MONTH,
            estimate=True,
        ),
        # Nothing connects at rest (a paused cluster reads nothing); a running one's own
        # background I/O is not published: counted as none.
        Line("Aurora I/O (Standard) at rest", 0, p.AURORA_IO_REQUEST, estimate=True),
        Line(f"Aurora backups ({retention} days)", 0, p.AURORA_BACKUP_GB_MONTH),
    ]
    if str(props.get("ManageMasterUserPassword", "false")).lower() == "true":
        lines.append(Line("Secrets Manager: the RDS-managed master secret", 1, p.SECRET_MONTH))
    return lines + _log_export(d, props)


def _proxy(d: Deployment, name: str) -> list[Line]:
    targets = [
        group
        for group in d.of_type("AWS::RDS::DBProxyTargetGroup")
        if d.resources[group]["Properties"]["DBProxyName"] == {"Ref": name}
    ]
    instances = []
    for group in targets:
        # Resolved: a Ref reads "<Name>" (tests.infra_support.Placeholders).
        props = d.props(group)
        instances += [str(ref).strip("<>") for ref in props.get("DBInstanceIdentifiers") or []]
        for ref in props.get("DBClusterIdentifiers") or []:
            cluster = str(ref).strip("<>")
            instances += [
                i for i in d.of_type("AWS::RDS::DBInstance") if _cluster_of_any(d, i) == cluster
            ]
    classes = [str(d.props(i)["DBInstanceClass"]) for i in instances]
    if "db.serverless" in classes:
        # Serverless v2: the target's capacity, at least 8 ACUs (what a pausing cluster would
        # pay to stay awake: RDS Proxy keeps it from pausing).
        acus = sum(_min_capacity(d, _cluster_of(d, i)) for i in instances)
        billed_acus = max(acus, p.RDS_PROXY_MIN_ACUS)
        return [
            Line(
                f"RDS Proxy ({billed_acus:g} ACUs billed)",
                billed_acus * p.HOURS_PER_MONTH,
                p.RDS_PROXY_ACU_HOUR,
            )
        ]
    vcpus = 0
    counts = {**p.RDS_VCPUS, **p.AURORA_VCPUS}
    for cls in classes:
        if cls not in counts:
            raise Unpriced(f"{name}: no vCPU count for {cls}")
        vcpus += counts[cls]
    billed = max(vcpus, p.RDS_PROXY_MIN_VCPUS)
    return [
        Line(
            f"RDS Proxy ({billed} vCPUs billed)", billed * p.HOURS_PER_MONTH, p.RDS_PROXY_VCPU_HOUR
        )
    ]


def _cluster_of_any(d: Deployment, instance: str) -> str | None:
    ref = d.resources[instance]["Properties"].get("DBClusterIdentifier")
    return str(ref["Ref"]) if isinstance(ref, dict) and "Ref" in ref else None


def _endpoint(d: Deployment, name: str) -> list[Line]:
    props = d.props(name)
    kind = props.get("VpcEndpointType", "Gateway")
    if kind == "Gateway":
        return []  # gateway endpoints (S3, DynamoDB) have no charge
    if kind != "Interface":
        raise Unpriced(f"{name}: {kind} endpoints are not priced")
    service = str(props["ServiceName"]).rsplit(".", 1)[-1]
    azs = len(props["SubnetIds"])
    return [
        Line(
            f"interface endpoint {service}, {azs} AZs",
            azs * p.HOURS_PER_MONTH,
            p.INTERFACE_ENDPOINT_AZ_HOUR,
        )
    ]


def _nat(d: Deployment, name: str) -> list[Line]:
    return [Line(f"NAT gateway {name}", p.HOURS_PER_MONTH, p.NAT_GATEWAY_HOUR)]


def _public_ipv4(d: Deployment, name: str) -> list[Line]:
    return [Line(f"public IPv4 address {name}", p.HOURS_PER_MONTH, p.PUBLIC_IPV4_HOUR)]


def _key(d: Deployment, name: str) -> list[Line]:
    # Rotation (EnableKeyRotation) adds $1 a month at each of the first two yearly rotations.
    return [Line(f"KMS customer managed key {name} (first year)", 1, p.KMS_KEY_MONTH)]


def _secret(d: Deployment, name: str) -> list[Line]:
    return [Line(f"Secrets Manager secret {name}", 1, p.SECRET_MONTH)]


def _dashboard(d: Deployment, name: str) -> list[Line]:
    return [Line(f"CloudWatch dashboard {name}", 1, p.DASHBOARD_MONTH)]


def alarm_kind(props: Mapping[str, Any]) -> tuple[str, float, Price]:
    """(kind, billed units, price) of one AWS::CloudWatch::Alarm."""
    if "MetricName" in props:
        high_res = int(props.get("Period", 60)) < 60
        if high_res:
            return "high-resolution", 1, p.ALARM_HIGH_RES_METRIC
        return "standard, one metric", 1, p.ALARM_STANDARD_METRIC
    queries = props["Metrics"]
    expressions = [str(q.get("Expression", "")) for q in queries]
    if any(e.lstrip().upper().startswith("SELECT") for e in expressions):
        return "Metrics Insights query", 1, p.ALARM_METRICS_INSIGHTS
    stats = sum("MetricStat" in q for q in queries)
    if "ThresholdMetricId" in props or any("ANOMALY_DETECTION_BAND" in e for e in expressions):
        return "anomaly detection", stats * p.ALARM_ANOMALY_METRICS, p.ALARM_STANDARD_METRIC
    return "metric math, per metric", stats, p.ALARM_STANDARD_METRIC


def _alarms(d: Deployment) -> list[Line]:
    by_kind: dict[str, tuple[int, float, Price]] = {}
    for name in d.of_type("AWS::CloudWatch::Alarm"):
        kind, units, price = alarm_kind(d.props(name))
        count, total, _ = by_kind.get(kind, (0, 0.0, price))
        by_kind[kind] = (count + 1, total + units, price)
    lines = [
        Line(f"CloudWatch alarms: {kind} ({count})", units, price)
        for kind, (count, units, price) in sorted(by_kind.items())
    ]
    composites = d.of_type("AWS::CloudWatch::CompositeAlarm")
    if composites:
        lines.append(
            Line(
                f"CloudWatch composite alarms ({len(composites)})",
                len(composites),
                p.ALARM_COMPOSITE,
            )
        )
    return lines


def _function_url(d: Deployment, name: str) -> list[Line]:
    """A Function URL bills nothing of its own, its function per invocation. Ingest's serves
    deliveries (traffic); an IAM one (the operator functions) serves operators' commands only,
    so its function costs nothing at rest, and its line says so."""
    props = d.props(name)
    if props.get("AuthType") != "AWS_IAM":
        return []
    function = str(props["TargetFunctionArn"]).strip("<>").split(".")[0]
    what = "invoked only by operators' commands (IAM Function URL), no provisioned concurrency"
    return [Line(f"{function}: {what}", 0, p.LAMBDA_REQUEST)]


def _pollers(d: Deployment, name: str) -> list[Line]:
    props = d.props(name)
    source = d.resources[name]["Properties"].get("EventSourceArn")
    target = source.get("Fn::GetAtt", [""])[0] if isinstance(source, dict) else ""
    if d.resources.get(target, {}).get("Type") != "AWS::SQS::Queue":
        raise Unpriced(f"{name}: only the polling of a queue of this stack is counted")
    bounded = bool(props.get("ScalingConfig", {}).get("MaximumConcurrency"))
    pollers = p.ESM_IDLE_POLLERS if bounded else p.ESM_IDLE_POLLERS_WITHOUT_MAX_CONCURRENCY
    receives = pollers * p.MINUTES_PER_MONTH * 60 / p.ESM_LONG_POLL_SECONDS
    return [
        Line(
            f"SQS empty receives: {pollers} pollers, {p.ESM_LONG_POLL_SECONDS} s long polls",
            receives,
            p.SQS_REQUEST,
            estimate=True,
        )
    ]


PER_RESOURCE: dict[str, Callable[[Deployment, str], list[Line]]] = {
    "AWS::RDS::DBCluster": _cluster,
    "AWS::RDS::DBInstance": _database,
    "AWS::RDS::DBProxy": _proxy,
    "AWS::EC2::VPCEndpoint": _endpoint,
    "AWS::EC2::NatGateway": _nat,
    "AWS::EC2::EIP": _public_ipv4,
    "AWS::KMS::Key": _key,
    "AWS::SecretsManager::Secret": _secret,
    "AWS::CloudWatch::Dashboard": _dashboard,
    "AWS::Lambda::EventSourceMapping": _pollers,
    "AWS::Lambda::Url": _function_url,
}
# Priced as a whole (by kind, or through what they run or feed) rather than one by one.
PRICED_TOGETHER = {
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::CompositeAlarm",
    "AWS::Events::Rule",
    "AWS::Logs::MetricFilter",
}


def unpriced_types(types: set[str]) -> set[str]:
    """Resource types that are neither priced here nor known to be free."""
    known = set(PER_RESOURCE) | PRICED_TOGETHER | set(p.FREE_TYPES)
    return {
        t
        for t in types
        if t not in known and not (t.startswith("Custom::") and "Custom::*" in known)
    }


def at_rest(d: Deployment) -> list[Line]:
    missing = unpriced_types({r["Type"] for r in d.resources.values()})
    if missing:
        raise Unpriced(f"no price and not known to be free: {sorted(missing)}")
    lines: list[Line] = []
    for kind, price in PER_RESOURCE.items():
        for name in d.of_type(kind):
            lines += price(d, name)
    return lines + _alarms(d) + scheduled_runs(d, idle_sweep)


def measure(names: Sequence[str], overrides: dict[str, str] | None = None) -> dict[str, SetBill]:
    """The at-rest bill of each named samconfig.toml environment."""
    sets = {}
    for name in names:
        d = deployment(name, overrides)
        level = str(d.parameters["SystemLogLevel"])
        memory = {k: int(d.parameters[k]) for k in p.TRAFFIC_MEASURED_MEMORY}
        ingest_level = str(d.parameters["IngestSystemLogLevel"])
        sets[name] = SetBill(str(d.parameters["Endpoint"]), level, at_rest(d), memory, ingest_level)
    return sets


MEMORY = ("<!-- cost:memory -->", "<!-- /cost:memory -->")


def memory_section() -> str:
    """docs/costs.md's "Memory sizes": the last bench.cost run's durations by size, and the
    template's defaults (bench/memory_sizing.py)."""
    d = deployment("default")
    template = {**d.parameters, "SweeperTimeout": d.props("SweeperFunction")["Timeout"]}
    table = memory_sizing.render(memory_sizing.load(), template)
    return f"{MEMORY[0]}\n{table}\n{MEMORY[1]}\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config-env", nargs="+", default=list(DOCUMENTED))
    parser.add_argument("--parameter-overrides", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--write", action="store_true", help="rewrite docs/costs.md's section")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.parameter_overrides)
    if args.write and (overrides or args.config_env != list(DOCUMENTED)):
        parser.error(
            f"--write documents the sets {', '.join(DOCUMENTED)} as samconfig.toml has them"
        )
    measured = measure(args.config_env, overrides)
    summary, section = render_summary(measured), render(measured)
    memory = memory_section()
    print(summary + "\n" + memory + "\n" + section)
    if args.write:
        write_doc(summary, COSTS_DOC, SUMMARY)
        write_doc(memory, COSTS_DOC, MEMORY)
        write_doc(section, COSTS_DOC)


if __name__ == "__main__":
    main()
