"""Prices and assumptions behind ``bench.cost_at_rest``: us-east-1 list prices, each named once with
its source, and the few figures that are measured or assumed rather than read from a price list.

Every price is the first (smallest) tier, without the free tier: an account's free tier is shared
with whatever else it runs. ``estimate=True`` marks a figure that is not a published price (a
measured size, an assumed rate, or a price whose exact rule we could not read): the docs say so.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_TAKEN = "2026-12-02"  # DESIGN.md §6 (checked AWS facts) and the AWS pricing pages below
HOURS_PER_MONTH = 730  # the pricing pages' month for hourly prices
MINUTES_PER_MONTH = 60 * 24 * 30  # a 30-day month: rate(1 minute) runs 43,200 times
GB = 1e9  # the pricing pages' GB for CloudWatch Logs


@dataclass(frozen=True)
class Price:
    usd: float
    unit: str
    source: str
    estimate: bool = False


# Resource types with no charge of their own while nothing happens, and why. Anything billed by
# use is counted where the use is (the schedule, the pollers, the log lines).
FREE_TYPES = {
    "AWS::IAM::Role": "IAM has no charge",
    "AWS::IAM::Policy": "IAM has no charge",
    "AWS::IAM::ManagedPolicy": "IAM has no charge",
    "AWS::Lambda::Function": "billed per invocation: the schedule and traffic",
    "AWS::Lambda::Permission": "a resource policy",
    "AWS::Lambda::Version": "code storage is a quota (75 GB a region), not billed",
    "AWS::Lambda::Alias": "configuration",
    "AWS::CodeDeploy::Application": "CodeDeploy has no charge for deployments to Lambda",
    "AWS::CodeDeploy::DeploymentGroup": "CodeDeploy has no charge for deployments to Lambda",
    "AWS::Lambda::LayerVersion": "code storage is a quota (75 GB), not billed",
    "AWS::Lambda::EventInvokeConfig": "configuration",
    "AWS::Logs::LogGroup": "billed by the bytes written and kept: counted with the lines",
    "AWS::SQS::Queue": "billed per request: the pollers' are counted with the mapping",
    "AWS::SQS::QueuePolicy": "a resource policy",
    "AWS::SNS::Topic": "billed per publish and delivery",
    "AWS::SNS::TopicPolicy": "a resource policy",
    "AWS::RDS::EventSubscription": "RDS event notifications have no charge (SNS bills delivery)",
    "AWS::SNS::Subscription": "billed per delivery",
    "AWS::Events::EventBus": "billed per event published",
    "AWS::ApiGatewayV2::Api": "billed per request",
    "AWS::ApiGatewayV2::Stage": "billed per request",
    "AWS::KMS::Alias": "no charge (the key is priced)",
    "AWS::RDS::DBSubnetGroup": "configuration",
    "AWS::RDS::DBParameterGroup": "configuration",
    "AWS::RDS::DBClusterParameterGroup": "configuration",
    "AWS::RDS::DBProxyTargetGroup": "priced with its proxy",
    "AWS::EC2::SecurityGroup": "no charge",
    "AWS::EC2::SecurityGroupIngress": "no charge",
    "AWS::EC2::SecurityGroupEgress": "no charge",
    "AWS::EC2::VPC": "no charge",
    "AWS::EC2::VPCCidrBlock": "an Amazon-provided IPv6 block has no charge",
    "AWS::EC2::Subnet": "no charge",
    "AWS::EC2::RouteTable": "no charge",
    "AWS::EC2::Route": "no charge",
    "AWS::EC2::SubnetRouteTableAssociation": "no charge",
    "AWS::EC2::EgressOnlyInternetGateway": "no hourly charge (DESIGN.md §6)",
    "AWS::EC2::InternetGateway": "no charge",
    "AWS::EC2::VPCGatewayAttachment": "no charge",
    "Custom::*": "a Lambda-backed custom resource: a few invocations per deploy",
    "AWS::S3::Bucket": "the idle ledger: two objects under 1 KB (S3 Standard storage rounds to"
    " $0.00); its requests are counted with the sweeper's runs",
    "AWS::S3::BucketPolicy": "a resource policy",
}


@dataclass(frozen=True)
class Line:
    """One row of the bill: ``quantity`` units at ``price`` a unit."""

    resource: str
    quantity: float
    price: Price
    estimate: bool = False  # the quantity is estimated or assumed, not counted or measured

    @property
    def monthly(self) -> float:
        return self.quantity * self.price.usd


class Unpriced(LookupError):
    """The template has something billed that this script cannot price."""


# --- Amazon RDS for PostgreSQL ("Amazon RDS for PostgreSQL pricing", On-Demand, US East) --------

_RDS_PAGE = "Amazon RDS for PostgreSQL pricing, On-Demand Single-AZ"
# Per hour, Single-AZ. Multi-AZ (one standby) is twice the rate. Classes listed are the ones we
# checked; any other class has no price here and the script refuses it (add it with its source).
RDS_INSTANCE_HOURLY: dict[str, Price] = {
    "db.t4g.micro": Price(0.016, "instance-hour", f"{_RDS_PAGE}; DESIGN.md §6 ≈ $11.70/month"),
    "db.t4g.small": Price(0.032, "instance-hour", f"{_RDS_PAGE}; DESIGN.md §6 Multi-AZ ≈ $47"),
    "db.t4g.medium": Price(0.065, "instance-hour", _RDS_PAGE),
}
RDS_VCPUS = {"db.t4g.micro": 2, "db.t4g.small": 2, "db.t4g.medium": 2}
RDS_MULTI_AZ_FACTOR = 2  # "Multi-AZ ... billed per DB instance-hour for both primary and standby"
RDS_GP3_GB_MONTH = Price(0.115, "GB-month", "RDS pricing, General Purpose (gp3) storage, Single-AZ")
RDS_BACKUP_GB_MONTH = Price(
    0.095,
    "GB-month beyond the provisioned size",
    "RDS pricing, backup storage: free up to 100 % of the provisioned storage",
)
RDS_PROXY_VCPU_HOUR = Price(
    0.015,
    "vCPU-hour of the target, 2 minimum",
    "RDS Proxy pricing (provisioned instances); DESIGN.md §6 ≈ $22",
)
RDS_PROXY_MIN_VCPUS = 2
# In front of Aurora Serverless v2 the proxy bills the target's ACUs instead, 8 at least.
RDS_PROXY_ACU_HOUR = Price(
    0.015,
    "ACU-hour of the target, 8 minimum",
    "RDS Proxy pricing (Aurora Serverless v2 targets): per ACU-hour, a minimum of 8 ACUs",
)
RDS_PROXY_MIN_ACUS = 8

# --- Amazon Aurora ("Amazon Aurora pricing", PostgreSQL-Compatible Edition, US East) ------------

_AURORA_PAGE = "Amazon Aurora pricing, PostgreSQL-Compatible, Aurora Standard"
AURORA_ACU_HOUR = Price(0.12, "ACU-hour", f"{_AURORA_PAGE}, Aurora Serverless v2")
# Provisioned instance classes we checked (Aurora PostgreSQL has no micro or small class); any
# other class has no price here and the script refuses it (add it with its source).
AURORA_INSTANCE_HOURLY: dict[str, Price] = {
    "db.t4g.medium": Price(0.073, "instance-hour", f"{_AURORA_PAGE}, On-Demand"),
}
AURORA_VCPUS = {"db.t4g.medium": 2}
AURORA_STORAGE_GB_MONTH = Price(
    0.10,
    "GB-month",
    f"{_AURORA_PAGE}, storage: the space the cluster volume uses, evaluated hourly (Aurora"
    " user guide, Managing performance and scaling: you are only charged for the space that you"
    " use)",
)
AURORA_IO_REQUEST = Price(0.20 / 1e6, "I/O request", f"{_AURORA_PAGE}, I/O requests")
AURORA_BACKUP_GB_MONTH = Price(
    0.021,
    "GB-month beyond the cluster's volume",
    "Amazon Aurora pricing, backup storage: no charge up to 100 % of the cluster's volume",
)

# --- network ("Amazon VPC pricing", "AWS PrivateLink pricing") -----------------------------------

INTERFACE_ENDPOINT_AZ_HOUR = Price(
    0.01, "endpoint-AZ-hour", "AWS PrivateLink pricing, interface endpoint; DESIGN.md §6 ≈ $7.30"
)
NAT_GATEWAY_HOUR = Price(0.045, "gateway-hour", "Amazon VPC pricing, NAT gateway; DESIGN.md §6")
PUBLIC_IPV4_HOUR = Price(0.005, "address-hour", "Amazon VPC pricing, public IPv4 address")

# --- keys and secrets ------------------------------------------------------------------------

KMS_KEY_MONTH = Price(
    1.00,
    "key-month",
    "AWS KMS pricing, customer managed key (the first two yearly rotations add $1 each)",
)
SECRET_MONTH = Price(0.40, "secret-month", "AWS Secrets Manager pricing")
SECRETS_API_CALL = Price(0.05 / 10_000, "call", "AWS Secrets Manager pricing, API calls")
# A secret encrypted with a customer managed key costs a KMS Decrypt per GetSecretValue.
KMS_REQUEST = Price(0.03 / 10_000, "request", "AWS KMS pricing, symmetric key requests")

# --- CloudWatch ("Amazon CloudWatch pricing": Metrics, Alarms, Dashboards, Logs) ---------------

CUSTOM_METRIC_MONTH = Price(
    0.30, "metric-month", "CloudWatch pricing, metrics (first 10,000); DESIGN.md §6"
)
ALARM_STANDARD_METRIC = Price(
    0.10, "alarm metric-month", "CloudWatch pricing, standard-resolution alarm, per metric"
)
ALARM_HIGH_RES_METRIC = Price(
    0.30, "alarm metric-month", "CloudWatch pricing, high-resolution alarm, per metric"
)
ALARM_COMPOSITE = Price(0.50, "alarm-month", "CloudWatch pricing, composite alarm")
ALARM_ANOMALY_METRICS = 3  # an anomaly detection alarm bills its metric and the band's two
ALARM_METRICS_INSIGHTS = Price(
    0.10,
    "alarm-month (one metric analyzed)",
    "CloudWatch pricing, alarms on a Metrics Insights query, billed per metric the query"
    " analyzes, no free tier: counted as one per alarm (a query over a metric nothing has"
    " published yet analyzes none; Rejected GROUP BY reason, one per reason seen; DeliveryRefused"
    " GROUP BY provider, one per provider with deliveries in the last hour)",
    estimate=True,
)
DASHBOARD_MONTH = Price(3.00, "dashboard-month", "CloudWatch pricing, dashboards; DESIGN.md §6")
LOGS_INGEST_GB = Price(0.50, "GB ingested", "CloudWatch pricing, Logs, standard class ingestion")
LOGS_INGEST_GB_IA = Price(
    0.25,
    "GB ingested",
    "CloudWatch pricing, Logs, Infrequent Access class ingestion (a group's LogGroupClass"
    " INFREQUENT_ACCESS)",
)
LOGS_STORE_GB_MONTH = Price(
    0.03,
    "GB-month stored",
    "CloudWatch pricing, Logs storage (archived); priced on uncompressed bytes, an upper bound",
)

# --- S3 ("Amazon S3 pricing", S3 Standard, US East): the idle ledger ---------------------------

_S3_PAGE = "Amazon S3 pricing, S3 Standard"
S3_GET = Price(0.0004 / 1000, "GET request", f"{_S3_PAGE}, GET and all other requests")
S3_PUT = Price(0.005 / 1000, "PUT request", f"{_S3_PAGE}, PUT, COPY, POST, LIST requests")

# --- Lambda, SQS, EventBridge ----------------------------------------------------------------

LAMBDA_REQUEST = Price(0.20 / 1e6, "request", "AWS Lambda pricing, requests")
LAMBDA_GB_SECOND_ARM = Price(0.0000133334, "GB-second", "AWS Lambda pricing, arm64 duration")
SQS_REQUEST = Price(0.40 / 1e6, "request", "Amazon SQS pricing, standard queue requests")
SCHEDULED_EVENT = Price(
    0.0,
    "scheduled event",
    "CloudWatch pricing, Events: all events except custom events are included",
)

# --- measured or assumed figures (not prices) ------------------------------------------------

# The sweeper's billed duration per idle run, by memory size, measured when every run connected
# (an upper bound for a run the idle ledger skips: two S3 GETs instead of the database's
# statements; not re-measured): `python -m bench.sweeper_at_rest
# --sweeps 41` on 2026-12-02 (the real handler on an empty database, PostgreSQL 1 ms and AWS
# 10 ms away; median of 40 warm runs: 69 ms wall, 3.9 ms CPU scaled below one vCPU). A second
# run at load average 7.6 on this 2-core machine measured 125 ms at 256 MB: $0.004 a month more.
SWEEPER_BILLED_MS_BY_MEMORY = {128: 120, 256: 93, 512: 79, 1024: 73, 1769: 70}
# Lambda's SQS pollers at rest: "When traffic is low, Lambda scales back the processing to five
# concurrent invokes, and can optimize to as few as 2 ... not available when you enable the
# maximum concurrency setting" (Lambda developer guide, "Configuring scaling behavior for SQS
# event source mappings"). Long polls of 20 s (SQS's longest wait): an assumption, AWS does not
# publish the pollers' wait time.
ESM_IDLE_POLLERS = 5
ESM_IDLE_POLLERS_WITHOUT_MAX_CONCURRENCY = 2
ESM_LONG_POLL_SECONDS = 20
# A paused Serverless v2 instance that a connection resumes runs at its least awake capacity
# (the at-rest note's 0.5 ACU) until nothing has connected for SecondsUntilAutoPause; the resume
# itself and the sweeper's run: about a minute (an estimate: AWS puts a resume at about 15 s).
AURORA_AWAKE_MIN_ACUS = 0.5
AURORA_WAKE_OVERHEAD_S = 60
# An Aurora cluster volume that holds only the schema (PostgreSQL's catalogs, the migrations'
# tables, the WAL Aurora keeps): an estimate, 1 GB; `VolumeBytesUsed` on a running cluster says.
# What the events add is traffic: PayloadRetentionDays of payloads.
AURORA_IDLE_VOLUME_GB = 1.0
# RDS Enhanced Monitoring writes one RDSOSMetrics event per interval to CloudWatch Logs (RDS
# creates that log group with 30 days' retention). Its size is an estimate: an OS sample with
# the process list is a few KB; measure it with `aws logs describe-log-streams
# --log-group-name RDSOSMetrics` (storedBytes) on a running stack.
ENHANCED_MONITORING_BYTES_PER_SAMPLE = 10_000
ENHANCED_MONITORING_RETENTION_DAYS = 30
# The postgresql log export at rest: checkpoints (every 5 minutes while RDS writes its
# heartbeat) and the odd connection line; an estimate.
RDS_LOG_EXPORT_BYTES_PER_MONTH = 5_000_000
# The traffic figure the totals add (docs/costs.md and docs/benchmarks.md, run of 2026-12-06,
# `python -m bench.cost --baseline …`, this tree's column): USD per million webhooks, all in,
# outbox excluded. That run spread the sweeper over 10 M webhooks a month; its share is taken
# out here, the at-rest table counts it.
TRAFFIC_RUN = "2026-12-06"
TRAFFIC_PER_MILLION = {"HttpApi": 2.015, "FunctionUrl": 0.984}
# Invocations per webhook in that run, with their p50 duration (ms), memory and peak RSS (MB):
# ingest one per webhook, the processor one per batch of 10.
TRAFFIC_INVOCATIONS = ((1.0, 29, 256, 71), (0.1, 59, 256, 39))
# The system log levels that run had (ingest's, the processor's): Lambda's platform lines are
# in its figure where they are INFO, and a set's levels add or take away the difference.
TRAFFIC_MEASURED_LEVELS = ("WARN", "INFO")
# GB-seconds in USD per million invocations at each memory size, from that run's memory table
# (docs/benchmarks.md): a set whose memory differs from the run's (ingest 256 MB, processor
# 256 MB) moves the traffic figure by the difference.
TRAFFIC_GB_S_PER_MILLION_INVOCATIONS = {
    "IngestMemorySize": {128: 0.0746, 256: 0.1025, 512: 0.1582, 1024: 0.2696, 1769: 0.4319},
    "ProcessorMemorySize": {128: 0.1497, 256: 0.2222, 512: 0.3669, 1024: 0.6570, 1769: 1.0772},
}
TRAFFIC_MEASURED_MEMORY = {"IngestMemorySize": 256, "ProcessorMemorySize": 256}
TRAFFIC_INVOCATIONS_PER_WEBHOOK = {"IngestMemorySize": 1.0, "ProcessorMemorySize": 0.1}
SWEEPER_SHARE_PER_MILLION = 0.0060  # requests $0.00086, GB-s $0.0024, logs 5.6 B/webhook $0.0028
# Custom metrics any traffic brings (billed by the hour they are published in, so a month with
# webhooks every hour pays all of each): one provider's Accepted, Duplicate and DeliveryRefused
# (ingest's metric filters; DeliveryRefused is 0 for a verified delivery) and the processor's
# Processed and ProcessingLatency. Failures add theirs only while they happen.
TRAFFIC_METRICS = ("Accepted", "Duplicate", "DeliveryRefused", "Processed", "ProcessingLatency")


def log_lines(
    what: str,
    bytes_a_month: float,
    retention_days: int,
    *,
    estimate: bool = False,
    log_class: str = "STANDARD",
) -> list[Line]:
    """Ingestion of a month's bytes at the group's class's price, and their storage once the
    retention is full (the same price in either class)."""
    kept_months = retention_days / 30
    ingest = LOGS_INGEST_GB_IA if log_class == "INFREQUENT_ACCESS" else LOGS_INGEST_GB
    return [
        Line(f"{what}: ingestion", bytes_a_month / GB, ingest, estimate),
        Line(
            f"{what}: storage at {retention_days} days' retention",
            bytes_a_month * kept_months / GB,
            LOGS_STORE_GB_MONTH,
            estimate,
        ),
    ]


def total(lines: list[Line]) -> float:
    """A bill's monthly total."""
    return sum(line.monthly for line in lines)
