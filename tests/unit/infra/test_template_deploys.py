"""template.yaml against the ways a real `sam deploy` fails or a stack misbehaves (issue 15).

The Rules section is evaluated with the parameter values a user would pass (what CloudFormation
does before it creates anything); conditions and names are resolved the same way.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra_support import (
    Placeholders,
    Resolver,
    boto3_usage,
    function_entry,
    imports_module,
    load_template,
    module_closure,
    parameter_values,
    resources_of_type,
    rule_failures,
    runs_in_the_vpc,
    serverless_functions,
)

RESOURCES = load_template()["Resources"]
NETWORK = {"VpcId": "vpc-0abc", "SubnetIds": "subnet-a,subnet-b"}
EXISTING_DB = {"DatabaseSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db-AbC"}
# boto3 clients that make no network call (the RDS IAM token is presigned locally).
LOCAL_ONLY_CLIENTS = {"rds"}


def resolver(stack_name: str = "webhook-inbox", **params: str) -> Resolver:
    return Resolver(parameter_values(**NETWORK, **params), Placeholders(), stack_name=stack_name)


def created(name: str, r: Resolver) -> bool:
    condition = RESOURCES[name].get("Condition")
    return condition is None or r.condition(condition)


# --- blocker 1: the custom resource must be able to answer CloudFormation ------------------


def test_endpoints_without_an_s3_route_are_refused_before_anything_is_created() -> None:
    """The defaults (endpoints, no route tables) used to create a stack that could not finish."""
    failures = rule_failures(resolver())
    assert len(failures) == 1
    assert "PrivateRouteTableIds" in failures[0]
    assert "CreateVpcEndpoints=false" in failures[0]


@pytest.mark.parametrize(
    "params",
    [
        {"PrivateRouteTableIds": "rtb-1,rtb-2"},
        {"CreateVpcEndpoints": "false"},  # a NAT gateway answers CloudFormation
        {"ExistingVpcEndpoints": "s3"},  # the VPC's own S3 gateway endpoint does
        {"PrivateRouteTableIds": "rtb-1", **EXISTING_DB},
    ],
)
def test_settings_with_a_way_to_s3_pass_the_rules(params: dict[str, str]) -> None:
    assert rule_failures(resolver(**params)) == []


def test_with_route_tables_the_s3_gateway_endpoint_is_created_and_awaited() -> None:
    r = resolver(PrivateRouteTableIds="rtb-1")
    assert created("S3GatewayEndpoint", r)
    ready = r.resolve(RESOURCES["DatabaseSchema"]["Properties"]["S3EndpointReady"])
    assert ready == "<S3GatewayEndpoint>"


# --- blocker 2: endpoints the VPC already has -----------------------------------------------


def interface_endpoints() -> dict[str, str]:
    """Interface endpoint resource -> the service it serves (`sqs`, `secretsmanager`, …)."""
    return {
        name: str(res["Properties"]["ServiceName"]["Fn::Sub"]).rsplit(".", 1)[1]
        for name, res in resources_of_type("AWS::EC2::VPCEndpoint").items()
        if res["Properties"]["VpcEndpointType"] == "Interface"
    }


def test_an_empty_vpc_gets_every_endpoint_the_functions_call() -> None:
    r = resolver(PrivateRouteTableIds="rtb-1")
    made = {svc for name, svc in interface_endpoints().items() if created(name, r)}
    assert made == {"sqs", "secretsmanager", "events"}
    r = resolver(PrivateRouteTableIds="rtb-1", OutboxDestination="sns")
    made = {svc for name, svc in interface_endpoints().items() if created(name, r)}
    assert made == {"sqs", "secretsmanager", "sns"}


def test_services_the_vpc_already_has_are_not_created_twice() -> None:
    """A second private-DNS endpoint for a service fails with "conflicting DNS domain"."""
    r = resolver(ExistingVpcEndpoints="sqs,secretsmanager,s3")
    made = {svc for name, svc in interface_endpoints().items() if created(name, r)}
    assert made == {"events"}
    assert not created("S3GatewayEndpoint", r)
    schema = RESOURCES["DatabaseSchema"]["Properties"]
    assert r.resolve(schema["SecretsEndpointReady"]) == "none"
    assert rule_failures(r) == []


def test_existing_endpoint_names_are_checked() -> None:
    failures = rule_failures(resolver(PrivateRouteTableIds="rtb-1", ExistingVpcEndpoints="sqs,ec2"))
    assert failures == ["ExistingVpcEndpoints may list only sqs, secretsmanager, events, sns, s3."]


def test_each_interface_endpoint_serves_a_service_the_code_calls_and_vice_versa() -> None:
    """Only the functions in the VPC need endpoints (DatabaseLogGroupsFunction runs outside)."""
    called: set[str] = set()
    in_vpc = [props for props in serverless_functions().values() if runs_in_the_vpc(props)]
    assert len(in_vpc) >= 4
    for props in in_vpc:
        called |= boto3_usage(module_closure(function_entry(props)[0])).services
    assert "sqs" in called, "the scan should see the functions' clients"
    # S3 (the idle ledger) goes through the free gateway endpoint the custom resources need
    # anyway: no interface endpoint for it.
    assert "s3" in called
    gateway = RESOURCES["S3GatewayEndpoint"]
    assert gateway["Properties"]["VpcEndpointType"] == "Gateway"
    assert set(interface_endpoints().values()) == called - LOCAL_ONLY_CLIENTS - {"s3"}


# --- network, ordering, names -------------------------------------------------------------


def test_every_security_group_replaces_the_default_allow_all_egress() -> None:
    """Without an inline egress rule EC2 adds allow-all, and separate egress rules restrict
    nothing."""
    for name, res in resources_of_type("AWS::EC2::SecurityGroup").items():
        assert res["Properties"].get("SecurityGroupEgress"), f"{name} keeps EC2's allow-all"


def test_the_proxy_reaches_only_the_database() -> None:
    inline = RESOURCES["ProxySecurityGroup"]["Properties"]["SecurityGroupEgress"]
    assert [rule["CidrIp"] for rule in inline] == ["127.0.0.1/32"]
    egress = RESOURCES["ProxyToDatabaseEgress"]["Properties"]
    assert egress["DestinationSecurityGroupId"] == {"Ref": "DatabaseSecurityGroup"}


@pytest.mark.parametrize(
    "name",
    [
        "IngestFunction",
        "ProcessorFunction",
        "SweeperFunction",
        "OperatorReadFunction",
        "OperatorActFunction",
    ],
)
def test_functions_run_only_after_the_schema_is_migrated(name: str) -> None:
    """Their event sources (API route, SQS mapping, schedule) refer to them, so they wait too."""
    depends = RESOURCES[name].get("DependsOn", [])
    assert "DatabaseSchema" in ([depends] if isinstance(depends, str) else depends)


PROXY_NAME = re.compile(r"^[a-zA-Z](?!.*--)[a-zA-Z0-9-]{0,62}(?<!-)$")


@pytest.mark.parametrize(
    "stack_name", ["webhook-inbox", "a" * 60, "payments--webhooks-production-eu-west-1-blue-x1"]
)
def test_the_proxy_name_is_valid_for_any_stack_name(stack_name: str) -> None:
    proxy = resolver(stack_name=stack_name).resolve(
        RESOURCES["DatabaseProxy"]["Properties"]["DBProxyName"]
    )
    assert PROXY_NAME.match(proxy), proxy
    assert proxy == proxy.lower()


def test_the_database_keeps_its_generated_name_so_an_update_never_replaces_it() -> None:
    # A DBInstanceIdentifier added to a deployed stack replaces the instance: a new, empty
    # database behind the stack, the old one orphaned by deletion protection.
    assert "DBInstanceIdentifier" not in RESOURCES["Database"]["Properties"]


# --- database logs ---------------------------------------------------------------------------


def test_server_logs_never_carry_bind_parameters() -> None:
    params = RESOURCES["DatabaseParameterGroup"]["Properties"]["Parameters"]
    assert params["log_parameter_max_length"] == "0"
    assert params["log_parameter_max_length_on_error"] == "0"


def test_every_exported_rds_log_group_gets_the_stacks_key_and_retention() -> None:
    """RDS creates /aws/rds/instance/<instance>/<log> for each export, with no key and no
    expiry; the instance's name is generated, so DatabaseLogGroups adopts them once it exists."""
    r = resolver(PrivateRouteTableIds="rtb-1")
    exports = RESOURCES["Database"]["Properties"]["EnableCloudwatchLogsExports"]
    adopter = RESOURCES["DatabaseLogGroups"]
    assert adopter["Condition"] == "CreateDatabase"
    assert r.condition(RESOURCES["Database"]["Condition"])
    props = r.resolve(adopter["Properties"])
    assert props["LogGroupNames"] == [f"/aws/rds/instance/<Database>/{log}" for log in exports]
    assert props["KmsKeyArn"] == "<AppKey.Arn>"
    assert props["RetentionInDays"] == r.resolve({"Ref": "LogRetentionDays"})
    assert props["ServiceToken"] == "<DatabaseLogGroupsFunction.Arn>"
    grant = r.resolve(RESOURCES["DatabaseLogGroupsRole"]["Properties"]["Policies"][0])
    (adopt,) = [
        s for s in grant["PolicyDocument"]["Statement"] if "logs:AssociateKmsKey" in s["Action"]
    ]
    assert adopt["Resource"] == (
        "arn:aws:logs:us-east-1:123456789012:log-group:/aws/rds/instance/<Database>/*"
    )


@pytest.mark.parametrize("engine", ["aurora-postgresql", "aurora-serverless-v2"])
def test_an_aurora_clusters_exported_log_gets_the_stacks_key_and_retention(engine: str) -> None:
    """Aurora exports per cluster, /aws/rds/cluster/<cluster>/<log>, and Aurora PostgreSQL has
    only the postgresql log (no upgrade log as RDS has)."""
    r = resolver(DatabaseEngine=engine)
    cluster = RESOURCES["DatabaseCluster"]
    assert r.condition(cluster["Condition"])
    assert not r.condition(RESOURCES["Database"]["Condition"])
    exports = cluster["Properties"]["EnableCloudwatchLogsExports"]
    assert exports == ["postgresql"]
    props = r.resolve(RESOURCES["DatabaseLogGroups"]["Properties"])
    assert props["LogGroupNames"] == [
        f"/aws/rds/cluster/<DatabaseCluster>/{log}" for log in exports
    ]
    grant = r.resolve(RESOURCES["DatabaseLogGroupsRole"]["Properties"]["Policies"][0])
    (adopt,) = [
        s for s in grant["PolicyDocument"]["Statement"] if "logs:AssociateKmsKey" in s["Action"]
    ]
    assert adopt["Resource"] == (
        "arn:aws:logs:us-east-1:123456789012:log-group:/aws/rds/cluster/<DatabaseCluster>/*"
    )


def test_the_aurora_cluster_keeps_the_instances_settings() -> None:
    """TLS only, bind parameters out of the log, encrypted with the stack's key, IAM auth, an
    RDS-managed secret, backups: the instance's guarantees, set on the cluster."""
    instance = RESOURCES["DatabaseParameterGroup"]["Properties"]["Parameters"]
    cluster_group = RESOURCES["DatabaseClusterParameterGroup"]["Properties"]
    assert cluster_group["Parameters"] == instance
    r = resolver(DatabaseEngine="aurora-serverless-v2", DatabaseEngineVersion="16.6")
    assert r.resolve(cluster_group["Family"]) == "aurora-postgresql16"
    db = RESOURCES["Database"]["Properties"]
    cluster = RESOURCES["DatabaseCluster"]["Properties"]
    for key in (
        "StorageEncrypted",
        "KmsKeyId",
        "EnableIAMDatabaseAuthentication",
        "ManageMasterUserPassword",
        "MasterUserSecret",
        "BackupRetentionPeriod",
        "PreferredMaintenanceWindow",
        "PreferredBackupWindow",
        "CopyTagsToSnapshot",
        "MasterUsername",
    ):
        assert cluster[key] == db[key], key
    assert cluster["DatabaseName"] == db["DBName"]
    for name in ("DatabaseClusterWriter", "DatabaseClusterReader"):
        assert RESOURCES[name]["Properties"]["PubliclyAccessible"] is False


@pytest.mark.parametrize(
    ("params", "scaling", "classes"),
    [
        (
            {"DatabaseEngine": "aurora-serverless-v2", "CreateDatabaseProxy": "false"},
            {"MinCapacity": "0", "MaxCapacity": "4", "SecondsUntilAutoPause": "300"},
            ["db.serverless", "db.serverless"],
        ),
        (
            {
                "DatabaseEngine": "aurora-serverless-v2",
                "AuroraMinCapacity": "0.5",
                "DatabaseMultiAz": "false",
            },
            {"MinCapacity": "0.5", "MaxCapacity": "4", "SecondsUntilAutoPause": None},
            ["db.serverless"],
        ),
        (
            {"DatabaseEngine": "aurora-postgresql", "DatabaseInstanceClass": "db.r7g.large"},
            None,
            ["db.r7g.large", "db.r7g.large"],
        ),
    ],
)
def test_aurora_capacity_and_instances_follow_the_parameters(
    params: dict[str, str], scaling: dict[str, str | None] | None, classes: list[str]
) -> None:
    r = resolver(PrivateRouteTableIds="rtb-1", **params)
    assert rule_failures(r) == []
    got = r.resolve(RESOURCES["DatabaseCluster"]["Properties"]["ServerlessV2ScalingConfiguration"])
    if scaling is None:
        assert got is None
    else:
        assert {k: (None if v is None else str(v)) for k, v in got.items()} == scaling
    made = [
        r.resolve(RESOURCES[name]["Properties"]["DBInstanceClass"])
        for name in ("DatabaseClusterWriter", "DatabaseClusterReader")
        if r.condition(RESOURCES[name]["Condition"])
    ]
    assert made == classes
    # A paused instance has no host for Enhanced Monitoring to sample.
    writer = r.resolve(RESOURCES["DatabaseClusterWriter"]["Properties"])
    assert writer["MonitoringInterval"] == (0 if scaling and scaling["MinCapacity"] == "0" else 60)


@pytest.mark.parametrize(
    ("params", "refused"),
    [
        ({"DatabaseEngine": "aurora-serverless-v2"}, "CreateDatabaseProxy=false"),
        ({"DatabaseEngine": "aurora-postgresql"}, "db.t4g.medium"),
        (
            {"DatabaseEngine": "aurora-postgresql", "DatabaseInstanceClass": "db.t4g.micro"},
            "db.t4g.medium",
        ),
        (
            {
                "DatabaseEngine": "aurora-serverless-v2",
                "DatabaseSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db",
                "CreateDatabaseProxy": "false",
            },
            "existing database",
        ),
    ],
)
def test_aurora_choices_that_cannot_work_are_refused_before_anything_is_created(
    params: dict[str, str], refused: str
) -> None:
    failures = rule_failures(resolver(PrivateRouteTableIds="rtb-1", **params))
    assert len(failures) == 1, failures
    assert refused in failures[0]


def test_the_log_group_adopter_runs_outside_the_vpc_with_a_role_of_its_own() -> None:
    """It needs only CloudWatch Logs and the S3 URL: in the VPC it would need a Logs endpoint
    (or a NAT). SAM's generated role would carry ENI rights for the Globals' VpcConfig."""
    props = serverless_functions()["DatabaseLogGroupsFunction"]
    assert not runs_in_the_vpc(props)
    assert props["Role"] == {"Fn::GetAtt": ["DatabaseLogGroupsRole", "Arn"]}
    assert props["Environment"] == {"Variables": {}}
    role = RESOURCES["DatabaseLogGroupsRole"]["Properties"]
    assert "ManagedPolicyArns" not in role


# --- existing database ---------------------------------------------------------------------


def test_a_secret_under_its_own_key_can_be_decrypted_by_every_function() -> None:
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    r = resolver(PrivateRouteTableIds="rtb-1", DatabaseSecretKmsKeyArn=key, **EXISTING_DB)
    assert rule_failures(r) == []
    for name, props in serverless_functions().items():
        if not imports_module(module_closure(function_entry(props)[0]), "webhook_inbox.store.db"):
            continue  # never reads the database secret
        statements = [s for s in r.resolve(props["Policies"][0]["Statement"]) if s]
        decrypts = [s for s in statements if s["Action"] == "kms:Decrypt" and s["Resource"] == key]
        assert decrypts, f"{name} cannot decrypt the database secret"


def test_an_rds_managed_secret_gets_its_location_from_parameters() -> None:
    r = resolver(DatabaseHost="db.example.internal", DatabasePort="6432", **EXISTING_DB)
    env = r.resolve(load_template()["Globals"]["Function"]["Environment"]["Variables"])
    assert (env["DATABASE_HOST"], env["DATABASE_PORT"], env["DATABASE_NAME"]) == (
        "db.example.internal",
        "6432",
        "webhook_inbox",
    )
    defaults = resolver(**EXISTING_DB).resolve(
        load_template()["Globals"]["Function"]["Environment"]["Variables"]
    )
    assert (defaults["DATABASE_HOST"], defaults["DATABASE_PORT"]) == ("", "")


def test_existing_database_settings_need_an_existing_database() -> None:
    failures = rule_failures(resolver(PrivateRouteTableIds="rtb-1", DatabaseHost="db.internal"))
    assert len(failures) == 1
    assert "DatabaseSecretArn" in failures[0]


# --- alarm topic key ------------------------------------------------------------------------


def test_alarms_may_use_the_key_in_awss_documented_form() -> None:
    """AWS's key policy example for alarms publishing to an encrypted topic has no condition."""
    statements = RESOURCES["AppKey"]["Properties"]["KeyPolicy"]["Statement"]
    cloudwatch = {"Service": "cloudwatch.amazonaws.com"}
    (statement,) = [s for s in statements if s["Principal"] == cloudwatch]
    assert set(statement["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert "Condition" not in statement


def test_only_this_accounts_alarms_may_publish_in_awss_documented_form() -> None:
    """AWS documents the topic policy for alarms with the alarm's ARN as aws:SourceArn; a
    condition alarms are not documented to send (aws:SourceAccount) could drop every alarm."""
    policy = RESOURCES["AlarmTopicPolicy"]["Properties"]["PolicyDocument"]
    statement, rds_events = policy["Statement"]
    assert statement["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert statement["Action"] == "sns:Publish"
    assert resolver().resolve(statement["Condition"]) == {
        "ArnLike": {"aws:SourceArn": "arn:aws:cloudwatch:us-east-1:123456789012:alarm:*"}
    }
    # The database's events (information, not alarms): this account's event subscriptions only.
    assert rds_events["Principal"] == {"Service": "events.rds.amazonaws.com"}
    assert rds_events["Action"] == "sns:Publish"
    assert resolver().resolve(rds_events["Condition"]) == {
        "ArnLike": {"aws:SourceArn": "arn:aws:rds:us-east-1:123456789012:es:*"},
        "StringEquals": {"aws:SourceAccount": "123456789012"},
    }


def test_the_database_has_a_fixed_maintenance_window_and_a_backup_window_apart() -> None:
    """PreferredMaintenanceWindow from the two parameters store-unavailable's quiet hour reads,
    and a backup window that never overlaps it (RDS refuses an update that would)."""
    props = RESOURCES["Database"]["Properties"]
    for hour in [f"{h:02d}" for h in range(24)]:
        values = resolver(MaintenanceWindowDay="wed", MaintenanceWindowHour=hour)
        window = values.resolve(props["PreferredMaintenanceWindow"])
        assert window == f"wed:{hour}:00-wed:{hour}:30"
        backup = values.resolve(props["PreferredBackupWindow"])
        start, end = (int(t[:2]) * 60 + int(t[3:]) for t in backup.split("-"))
        maintenance = int(hour) * 60
        assert end - start == 30
        # 30-minute spans on a 24-hour clock: apart when neither starts inside the other.
        assert (start - maintenance) % 1440 >= 30
        assert (maintenance - start) % 1440 >= 30
    events = RESOURCES["DatabaseEvents"]
    assert events["Condition"] == "CreateDatabase"
    categories = set(resolver().resolve(events["Properties"]["EventCategories"]))
    assert categories == {"maintenance", "availability", "failover"}
    assert events["Properties"]["SnsTopicArn"] == {"Ref": "AlarmTopic"}
    # Aurora: the same windows on the cluster, and the cluster's events (a db-cluster source has
    # no "availability" category; "notification" would mail every pause and resume).
    aurora = resolver(DatabaseEngine="aurora-serverless-v2", CreateDatabaseProxy="false")
    cluster = RESOURCES["DatabaseCluster"]["Properties"]
    for key in ("PreferredMaintenanceWindow", "PreferredBackupWindow"):
        assert aurora.resolve(cluster[key]) == aurora.resolve(props[key])
    subscription = aurora.resolve(events["Properties"])
    assert subscription["SourceType"] == "db-cluster"
    assert subscription["SourceIds"] == ["<DatabaseCluster>"]
    assert set(subscription["EventCategories"]) == {"maintenance", "failure", "failover"}


# Which AWS services encrypt with the stack's key on a function's behalf, by what it calls.
KEY_USERS = {"sqs", "secretsmanager", "sns", "s3"}


def test_a_function_may_use_the_stacks_key_only_through_the_services_that_encrypt_with_it() -> None:
    """kms:Decrypt on the app key with no kms:ViaService would let a function's credentials
    decrypt anything the key encrypted, directly; through SQS, Secrets Manager and SNS only, a
    leaked credential reads no more than those calls return."""
    found = 0
    for name, function in serverless_functions().items():
        for policy in function.get("Policies", []):
            for statement in _statements(policy):
                if statement.get("Resource") != {"Fn::GetAtt": ["AppKey", "Arn"]}:
                    continue
                found += 1
                services = statement["Condition"]["StringEquals"]["kms:ViaService"]
                hosts = {s["Fn::Sub"] for s in services}
                assert hosts, name
                assert all(
                    re.fullmatch(r"(\w+)\.\$\{AWS::Region\}\.amazonaws\.com", h) for h in hosts
                ), (name, hosts)
                assert {h.split(".")[0] for h in hosts} <= KEY_USERS, (name, hosts)
    assert found >= 6  # ingest, processor, sweeper, migrations and both operator functions


def _statements(policy: Any) -> list[dict[str, Any]]:
    """A policy's statements, conditional ones (``!If [Condition, statement, …]``, such as the
    stack key's with EncryptionKey=customer-managed) included."""
    found = []
    for statement in policy.get("Statement", []) if isinstance(policy, dict) else []:
        branches = statement["Fn::If"][1:] if "Fn::If" in statement else [statement]
        found += [b for b in branches if isinstance(b, dict) and ("Sid" in b or "Effect" in b)]
    return found


def test_a_deploy_waits_for_a_paused_aurora_instance_to_resume() -> None:
    """The migrations connect on every deploy that ships new code: a paused instance resumes
    on that connection, which AWS puts at about 15 s (30 s or more after a day paused). A
    connect timeout shorter than that fails the deploy and rolls it back."""
    env = serverless_functions()["MigrationsFunction"]["Environment"]["Variables"]
    paused = resolver(
        PrivateRouteTableIds="rtb-1",
        DatabaseEngine="aurora-serverless-v2",
        CreateDatabaseProxy="false",
    )
    assert int(paused.resolve(env["DB_CONNECT_TIMEOUT_S"])) >= 2 * 30
    timeout_s = int(serverless_functions()["MigrationsFunction"]["Timeout"])
    assert int(paused.resolve(env["DB_CONNECT_TIMEOUT_S"])) < timeout_s / 2
    awake = resolver(
        PrivateRouteTableIds="rtb-1", DatabaseEngine="aurora-serverless-v2", AuroraMinCapacity="0.5"
    )
    # Anything that does not pause keeps the timeout every deployed stack has.
    assert awake.resolve(env["DB_CONNECT_TIMEOUT_S"]) == "10"
    assert resolver(PrivateRouteTableIds="rtb-1").resolve(env["DB_CONNECT_TIMEOUT_S"]) == "10"
