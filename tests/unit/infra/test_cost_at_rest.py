"""The bill at rest (issue 26, section 3): bench/cost_at_rest.py counts every billed resource of
the translated template, refuses one it cannot price, and docs/costs.md shows its output."""

from __future__ import annotations

import copy
import re

import pytest

from bench import at_rest_prices as p
from bench import at_rest_report as report
from bench import cost_at_rest as cost
from bench import memory_sizing
from bench.at_rest_prices import total
from bench.idle_sweep import idle_sweep, sweep_steps
from bench.template_deployment import deployment
from tests import infra_support
from tests.support import ROOT

SETS = cost.DOCUMENTED


@pytest.fixture(scope="module")
def measured() -> dict[str, report.SetBill]:
    return cost.measure(SETS)


def test_every_resource_type_in_the_translated_template_is_priced_or_known_free() -> None:
    # Every resource, whatever its condition: a billed type behind any parameter needs a price.
    types = {r["Type"] for r in infra_support.translated_template()["Resources"].values()}
    assert cost.unpriced_types(types) == set()


def test_a_billed_resource_without_a_price_stops_the_count() -> None:
    d = deployment("default")
    d.resources = copy.deepcopy(d.resources)
    d.resources["Cache"] = {"Type": "AWS::ElastiCache::CacheCluster", "Properties": {}}
    with pytest.raises(p.Unpriced, match="AWS::ElastiCache::CacheCluster"):
        cost.at_rest(d)


def test_a_database_class_without_a_price_is_refused_not_guessed() -> None:
    d = deployment("default", {"DatabaseInstanceClass": "db.r7g.large"})
    with pytest.raises(p.Unpriced, match=r"db\.r7g\.large"):
        cost.at_rest(d)


def test_the_free_list_holds_nothing_this_script_prices() -> None:
    assert not (set(p.FREE_TYPES) & (set(cost.PER_RESOURCE) | cost.PRICED_TOGETHER))


def test_every_database_line_follows_the_parameters() -> None:
    single = cost.at_rest(deployment("default", {"DatabaseMultiAz": "false"}))
    multi = cost.at_rest(deployment("default", {"DatabaseMultiAz": "true"}))
    by_name = {line.resource: line.monthly for line in multi}
    assert by_name["RDS db.t4g.small, Multi-AZ"] == pytest.approx(2 * 0.032 * 730)
    assert by_name["RDS gp3 storage, 20 GB, Multi-AZ"] == pytest.approx(2 * 20 * 0.115)
    assert {line.resource: line.monthly for line in single}["RDS db.t4g.small, Single-AZ"] == (
        pytest.approx(0.032 * 730)
    )
    # RDS keeps the master password in a secret of its own: billed, though not in the template.
    assert "Secrets Manager: the RDS-managed master secret" in by_name


def test_rds_proxy_bills_its_two_vcpu_minimum() -> None:
    lines = cost.at_rest(deployment("default", {"DatabaseInstanceClass": "db.t4g.micro"}))
    proxy = [line for line in lines if line.resource.startswith("RDS Proxy")]
    # A db.t4g.micro has 2 vCPUs, the minimum anyway: 2 x $0.015 x 730 h.
    assert [line.monthly for line in proxy] in ([], [pytest.approx(21.90)])


def _by_resource(lines: list[p.Line]) -> dict[str, float]:
    return {line.resource: line.monthly for line in lines}


def test_a_paused_aurora_writer_bills_no_capacity_an_awake_one_its_minimum() -> None:
    paused = _by_resource(cost.at_rest(deployment("aurora-paused")))
    writer = [name for name in paused if name.startswith("Aurora Serverless v2")]
    assert writer == [
        "Aurora Serverless v2 DatabaseClusterWriter: paused (0 ACUs) once nothing has connected"
        " for 300 s",
        "Aurora Serverless v2 DatabaseClusterWriter: woken by the sweeper's 30 backstop runs,"
        " 0.5 ACU for 360 s each",
    ]
    assert paused[writer[0]] == 0
    # The idle ledger's backstop: one database run a day (IDLE_MAX_SKIP_SECONDS 86,400) wakes
    # it for AuroraSecondsUntilAutoPause and about a minute more.
    assert paused[writer[1]] == pytest.approx(30 * 360 / 3600 * 0.5 * 0.12)
    assert paused["Aurora storage (Standard): the volume of an empty cluster"] == pytest.approx(
        p.AURORA_IDLE_VOLUME_GB * 0.10
    )
    assert "Secrets Manager: the RDS-managed master secret" in paused
    assert not any(name.startswith(("RDS db.", "RDS gp3", "RDS Enhanced")) for name in paused)
    awake = _by_resource(cost.at_rest(deployment("aurora-paused", {"AuroraMinCapacity": "0.5"})))
    assert awake["Aurora Serverless v2 DatabaseClusterWriter: 0.5 ACUs, its minimum"] == (
        pytest.approx(0.5 * 0.12 * 730)
    )
    # Awake, the instance has a host to watch: Enhanced Monitoring is on as for RDS.
    assert any(name.startswith("RDS Enhanced Monitoring") for name in awake)


def test_the_traffic_rows_of_a_pausing_set_say_what_they_leave_out(
    measured: dict[str, report.SetBill],
) -> None:
    """The per-million figure has no database in it: right for an instance billed whatever the
    traffic, not for a cluster that traffic wakes. Its row is marked and the mark explained."""
    section = report.render(measured)
    (row,) = [line for line in section.splitlines() if line.startswith("| `aurora-paused` (")]
    assert " †" in row
    assert f"† {report.AWAKE_WITH_TRAFFIC['aurora-paused']}" in section
    assert "0.5 ACU" in report.AWAKE_WITH_TRAFFIC["aurora-paused"]
    (small,) = [line for line in section.splitlines() if line.startswith("| `small` (")]
    assert "†" not in small


def test_rds_proxy_in_front_of_serverless_v2_bills_its_eight_acu_minimum() -> None:
    lines = cost.at_rest(
        deployment("default", {"DatabaseEngine": "aurora-serverless-v2", "AuroraMinCapacity": "1"})
    )
    proxy = [line for line in lines if line.resource.startswith("RDS Proxy")]
    assert [(line.resource, line.monthly) for line in proxy] == [
        ("RDS Proxy (8 ACUs billed)", pytest.approx(8 * 0.015 * 730))
    ]


def test_provisioned_aurora_bills_each_instance_and_refuses_an_unpriced_class() -> None:
    aurora = {"DatabaseEngine": "aurora-postgresql", "DatabaseInstanceClass": "db.t4g.medium"}
    lines = _by_resource(cost.at_rest(deployment("default", aurora)))  # Multi-AZ: a reader too
    assert lines["Aurora db.t4g.medium DatabaseClusterWriter"] == pytest.approx(0.073 * 730)
    assert lines["Aurora db.t4g.medium DatabaseClusterReader"] == pytest.approx(0.073 * 730)
    # Behind RDS Proxy: both instances' vCPUs (2 each).
    assert lines["RDS Proxy (4 vCPUs billed)"] == pytest.approx(4 * 0.015 * 730)
    with pytest.raises(p.Unpriced, match=r"db\.r7g\.large"):
        cost.at_rest(deployment("default", {**aurora, "DatabaseInstanceClass": "db.r7g.large"}))


def test_interface_endpoints_are_billed_per_az_in_an_existing_vpc() -> None:
    d = deployment(
        "default",
        {
            "VpcId": "vpc-0example",
            "SubnetIds": "subnet-a,subnet-b,subnet-c",
            "CreateVpcEndpoints": "true",
            "PrivateRouteTableIds": "rtb-0example",
        },
    )
    endpoints = [line for line in cost.at_rest(d) if line.resource.startswith("interface")]
    assert endpoints, "CreateVpcEndpoints=true in an existing VPC creates interface endpoints"
    for line in endpoints:
        assert line.resource.endswith("3 AZs")
        assert line.monthly == pytest.approx(3 * 730 * 0.01)


def test_alarm_kinds_follow_the_pricing_pages() -> None:
    standard = {"MetricName": "Errors", "Period": 300}
    math = {"Metrics": [{"MetricStat": {}}, {"MetricStat": {}}, {"Expression": "a+b"}]}
    insights = {"Metrics": [{"Expression": "SELECT SUM(x) FROM y"}]}
    anomaly = {"Metrics": [{"MetricStat": {}}], "ThresholdMetricId": "band"}
    assert cost.alarm_kind(standard)[1:] == (1, p.ALARM_STANDARD_METRIC)
    assert cost.alarm_kind({**standard, "Period": 10})[1:] == (1, p.ALARM_HIGH_RES_METRIC)
    assert cost.alarm_kind(math)[1:] == (2, p.ALARM_STANDARD_METRIC)
    assert cost.alarm_kind(insights)[1:] == (1, p.ALARM_METRICS_INSIGHTS)
    assert cost.alarm_kind(anomaly)[1] == 3


def test_every_alarm_of_the_template_is_counted(
    measured: dict[str, report.SetBill],
) -> None:
    alarms = len(deployment("default").of_type("AWS::CloudWatch::Alarm"))
    lines = measured["default"].lines
    counted = sum(
        int(m.group(1))
        for line in lines
        if (m := re.match(r"CloudWatch alarms: .* \((\d+)\)$", line.resource))
    )
    assert counted == alarms


def test_an_idle_sweep_publishes_no_custom_metric() -> None:
    # Rendered by the sweeper's own emit_metrics: at rest every counter and gauge is zero, and
    # zeros are not published, so the idle stack pays for none of them (before: fourteen).
    run = idle_sweep(deployment("default"), "SweeperFunction")
    assert run.custom_metrics == set()
    assert sweep_steps()  # the summary line lists the steps Sweep.run really loops over


def test_the_sweeper_runs_43200_times_a_month(
    measured: dict[str, report.SetBill],
) -> None:
    lines = measured["default"].lines
    runs = [line for line in lines if line.resource.endswith("scheduled runs")]
    assert [line.quantity for line in runs] == [43_200]


def test_docs_costs_md_shows_the_scripts_output(
    measured: dict[str, report.SetBill],
) -> None:
    stale = "docs/costs.md is stale: run `python -m bench.cost_at_rest --write`"
    assert report.doc_section(cost.COSTS_DOC) == report.render(measured), stale
    summary = report.doc_section(cost.COSTS_DOC, report.SUMMARY)
    assert summary == report.render_summary(measured), stale
    assert cost.COSTS_DOC.read_text().index(summary) < 40  # it leads the page


@pytest.mark.parametrize("where", ["README.md", "docs/deploy.md", "samconfig.toml"])
def test_the_guided_path_states_the_bill_at_rest_of_what_it_deploys(
    where: str, measured: dict[str, report.SetBill]
) -> None:
    """What pressing Enter everywhere costs, and the one flag for the small set, where a user
    deciding reads: the figures the at-rest count gives today."""
    text = " ".join((ROOT / where).read_text().split())
    for name in SETS:
        assert f"${total(measured[name].lines):.2f}" in text, (where, name)
    assert "--config-env small" in text


@pytest.mark.parametrize("name", SETS)
def test_each_goal_is_met_or_the_docs_say_by_how_much_it_is_missed(
    name: str, measured: dict[str, report.SetBill]
) -> None:
    monthly = total(measured[name].lines)
    doc = report.doc_section(cost.COSTS_DOC)
    assert f"${monthly:.2f} a month" in doc
    if monthly > report.GOALS[name]:
        assert f"missed by ${monthly - report.GOALS[name]:.2f}" in doc
    else:
        assert monthly <= report.GOALS[name]


def _with_filter(group: str, pattern: str, **transformation: str) -> cost.Deployment:
    d = deployment("default")
    d.resources = dict(d.resources)
    d.resources["ExtraMetricFilter"] = {
        "Type": "AWS::Logs::MetricFilter",
        "Properties": {
            "LogGroupName": {"Ref": group},
            "FilterPattern": pattern,
            "MetricTransformations": [
                {"MetricNamespace": "WebhookInbox", "MetricName": "Extra", "MetricValue": "1"}
                | transformation
            ],
        },
    }
    return d


def _filter_line(d: cost.Deployment) -> p.Line:
    (line,) = [x for x in cost.at_rest(d) if x.resource.startswith("custom metrics: metric filt")]
    return line


@pytest.mark.parametrize(
    ("group", "pattern", "transformation", "published"),
    [
        # The idle sweep's summary line (a run the idle ledger skips) feeds a filter on the
        # sweeper's group...
        ("SweeperLogGroup", '{ $.message = "sweep skipped: idle" }', {}, 1),
        ("SweeperLogGroup", "sweep skipped", {}, 1),
        # ...not one its lines do not match (a timeout line, say)...
        ("SweeperLogGroup", "Task timed out", {}, 0),
        ("SweeperLogGroup", '{ $.message = "sweep aborted" }', {}, 0),
        # ...but a DefaultValue publishes for every line of the group.
        ("SweeperLogGroup", "Task timed out", {"DefaultValue": "0"}, 1),
        # Ingest's group gets no line without traffic, DefaultValue or not.
        ("IngestLogGroup", '{ $.message = "accepted" }', {"DefaultValue": "0"}, 0),
    ],
)
def test_metric_filters_publish_at_rest_only_when_idle_lines_feed_them(
    group: str, pattern: str, transformation: dict[str, str], published: int
) -> None:
    assert _filter_line(_with_filter(group, pattern, **transformation)).quantity == published


def test_the_metrics_traffic_brings_are_ones_the_stack_publishes() -> None:
    filters = {f.metric for f in infra_support.metric_filters()}
    processor = infra_support.ROOT / "functions" / "processor" / "app.py"
    emf = infra_support.emf_metric_names([processor])
    assert set(p.TRAFFIC_METRICS) <= filters | emf


def test_platform_lines_move_the_traffic_figure_only_where_a_level_differs_from_the_runs() -> None:
    # The measured run had the defaults: ingest's WARN, the processor's INFO.
    assert p.TRAFFIC_MEASURED_LEVELS == ("WARN", "INFO")
    quiet = report.SetBill("HttpApi", "WARN", [])
    processor = report.SetBill("HttpApi", "INFO", [])  # the defaults: ingest's WARN
    chatty = report.SetBill("HttpApi", "INFO", [], ingest_system_log_level="INFO")
    assert report.traffic_per_million(processor) == pytest.approx(
        p.TRAFFIC_PER_MILLION["HttpApi"] - p.SWEEPER_SHARE_PER_MILLION
    )
    # platform.start + platform.report: a few hundred bytes per invocation, ~$0.15 a million
    # for ingest's, a tenth of that for a batch's share of the processor's.
    processor_share = report.traffic_per_million(processor) - report.traffic_per_million(quiet)
    assert 0.01 < processor_share < 0.025
    assert 0.1 < report.traffic_per_million(chatty) - report.traffic_per_million(quiet) < 0.25


def test_zero_valued_metrics_are_told_apart_from_the_others() -> None:
    from bench.idle_sweep import zero_valued

    def emf(name: str, value: object) -> dict[str, object]:
        directive = {"Namespace": "N", "Dimensions": [["service"]], "Metrics": [{"Name": name}]}
        return {"_aws": {"CloudWatchMetrics": [directive]}, "service": "s", name: value}

    lines = [emf("Idle", [0.0]), emf("Busy", [0.0]), emf("Busy", 3), emf("Gauge", 0)]
    assert {name for _, name, _ in zero_valued(lines)} == {"Idle", "Gauge"}


def test_empty_receives_follow_the_mappings_maximum_concurrency() -> None:
    def receives(d: cost.Deployment) -> float:
        (line,) = [x for x in cost.at_rest(d) if x.resource.startswith("SQS empty receives")]
        return line.quantity

    d = deployment("default")
    # Five pollers a 20 s long poll each, every minute of a 30-day month.
    assert receives(d) == 5 * 3 * 43_200
    (mapping,) = d.of_type("AWS::Lambda::EventSourceMapping")
    d.resources = copy.deepcopy(d.resources)
    del d.resources[mapping]["Properties"]["ScalingConfig"]
    assert receives(d) == 2 * 3 * 43_200  # Lambda may scale down to two without the setting


def test_the_traffic_figure_follows_the_sets_memory_sizes() -> None:
    measured = report.SetBill("HttpApi", "INFO", [])
    assert measured.memory_mb == {"IngestMemorySize": 256, "ProcessorMemorySize": 256}
    bigger = report.SetBill(
        "HttpApi", "INFO", [], {"IngestMemorySize": 256, "ProcessorMemorySize": 512}
    )
    # A tenth of a processor invocation per webhook, at the run's price for each size.
    per_million = p.TRAFFIC_GB_S_PER_MILLION_INVOCATIONS["ProcessorMemorySize"]
    difference = report.traffic_per_million(bigger) - report.traffic_per_million(measured)
    assert difference == pytest.approx(0.1 * (per_million[512] - per_million[256]))
    assert difference > 0


def test_a_log_group_in_the_infrequent_access_class_is_priced_at_its_ingestion_price() -> None:
    """The class halves ingestion (storage is priced alike): a group the template puts in it is
    counted at that price, the others at the standard class's."""
    standard = deployment("default")
    infrequent = deployment("default")
    infrequent.resources = copy.deepcopy(infrequent.resources)
    infrequent.resources["SweeperLogGroup"]["Properties"]["LogGroupClass"] = "INFREQUENT_ACCESS"

    def ingestion(d: cost.Deployment) -> p.Line:
        (line,) = [
            x
            for x in cost.at_rest(d)
            if x.resource.startswith("SweeperFunction logs") and x.resource.endswith("ingestion")
        ]
        return line

    assert ingestion(standard).price is p.LOGS_INGEST_GB
    assert ingestion(infrequent).price is p.LOGS_INGEST_GB_IA
    assert ingestion(infrequent).monthly == pytest.approx(ingestion(standard).monthly / 2)


def test_docs_costs_md_shows_the_memory_sizes_table() -> None:
    stale = "docs/costs.md is stale: run python -m bench.cost_at_rest --write"
    assert report.doc_section(cost.COSTS_DOC, cost.MEMORY) == cost.memory_section(), stale


def test_every_memory_default_meets_its_constraints_and_says_why_it_is_not_the_rules() -> None:
    d = deployment("default")
    template = {**d.parameters, "SweeperTimeout": d.props("SweeperFunction")["Timeout"]}
    for row in memory_sizing.decide(memory_sizing.load(), template):
        assert row["default"] >= row["minimum"], row
        if row["default"] < row["pick"]:
            assert row["why"].startswith(f"cost: below the rule's {row['pick']} MB"), row


@pytest.mark.parametrize(
    ("p99", "pick"),
    [
        ({128: 50, 256: 46, 512: 45}, 128),  # 128 is within 10 % of 256
        ({128: 80, 256: 60, 512: 56}, 256),  # 256 is the first within 10 % of the next
        ({128: 80, 256: 60, 512: 40}, 512),  # no size is: the largest
    ],
)
def test_the_rule_picks_the_cheapest_size_within_a_tenth_of_the_next(
    p99: dict[int, float], pick: int
) -> None:
    assert memory_sizing.rule_size(p99) == pick


def test_the_sweepers_backlog_runs_are_kept_apart_from_its_idle_ones() -> None:
    """A run that drains the mix's outbox is the constraint's case: the rule's p99 is over the
    runs that published nothing."""

    class Runs:
        wall_ms = [3000.0, 90.0, 95.0, 3100.0, 92.0]
        cpu_ms = [50.0, 4.0, 4.0, 52.0, 4.0]
        published = [600, 0, 0, 600, 0]
        init_wall_ms = init_cpu_ms = first_wall_ms = first_cpu_ms = [300.0, 310.0]
        peak_rss_mb = [60.0, 61.0]

    found = memory_sizing.measurements(
        {"ingest": Runs, "processor": Runs, "sweeper": Runs},
        1e-5,
        {"ingest": 1.0, "processor": 0.1, "sweeper": 0.004},
        "a test",
    )
    sweeper = found["functions"]["sweeper"]
    assert (sweeper["runs"], sweeper["backlog"]["runs"]) == (3, 2)
    assert sweeper["sizes"]["1769"]["p99"] < 100 < sweeper["backlog"]["sizes"]["1769"]["p99"]
