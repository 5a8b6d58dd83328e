"""`webhook-inbox invoke`: a function's settings and environment, resolved as SAM resolves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ROOT
from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.local_invoke import environment, template

TEMPLATE = ROOT / "template.yaml"


def open_real_template(
    samconfig: Path | None = None, overrides: tuple[str, ...] = ()
) -> template.Template:
    return template.open_template(
        TEMPLATE, samconfig=samconfig, config_env="default", overrides=overrides, region="eu-west-1"
    )


def test_parameter_overrides_take_both_of_sams_spellings() -> None:
    parsed = template.parse_overrides(
        ["MaxAttempts=3 LogLevel='DEBUG'", "ParameterKey=AlarmEmail,ParameterValue=a@b.example"]
    )

    assert parsed == {"MaxAttempts": "3", "LogLevel": "DEBUG", "AlarmEmail": "a@b.example"}
    with pytest.raises(ConfigurationError, match="not Key=Value"):
        template.parse_overrides(["MaxAttempts"])


def test_globals_merge_under_the_functions_own_settings() -> None:
    spec = template.function_spec(open_real_template(), "IngestFunction")

    assert (spec.handler, spec.code_uri, spec.runtime) == (
        "app.handler",
        "functions/ingest/",
        "python3.13",
    )
    assert (spec.timeout, spec.memory_mb, spec.architectures) == (8, 256, ("arm64",))
    assert spec.layers == ("SharedLayer",)
    assert spec.environment["DB_CONNECT_TIMEOUT_S"] == "3"  # from Globals
    assert spec.environment["MAX_BODY_BYTES"] == "1048576"  # its own, from a parameter default
    assert spec.environment["PROCESSING_QUEUE_URL"] == template.Unresolved("!Ref ProcessingQueue")
    assert spec.environment["POWERTOOLS_SERVICE_NAME"] == "webhook-inbox"  # AWS::StackName
    assert spec.log_group == "/aws/lambda/webhook-inbox/ingest"


def test_samconfig_sections_of_sam_local_invoke_then_the_command_line(tmp_path: Path) -> None:
    samconfig = tmp_path / "samconfig.toml"
    samconfig.write_text(
        'version = 0.1\n[default.global.parameters]\nstack_name = "shop-inbox"\n'
        'parameter_overrides = ["MaxAttempts=3", "LogLevel=WARNING"]\n'
        '[default.local_invoke.parameters]\nparameter_overrides = "LogLevel=DEBUG"\n'
        '[default.deploy.parameters]\nparameter_overrides = ["OutboxDestination=sns"]\n'
    )

    env = template.function_spec(open_real_template(samconfig), "SweeperFunction").environment
    assert (env["MAX_ATTEMPTS"], env["POWERTOOLS_LOG_LEVEL"]) == ("3", "DEBUG")
    assert env["OUTBOX_DESTINATION"] == "eventbridge"  # deploy's overrides are not read
    assert env["POWERTOOLS_SERVICE_NAME"] == "shop-inbox"

    tpl = open_real_template(samconfig, ("MaxAttempts=5", "DatabaseSecretArn=arn:db"))
    env = template.function_spec(tpl, "SweeperFunction").environment
    assert env["MAX_ATTEMPTS"] == "5"
    # The condition follows the parameter: an existing database, no IAM auth.
    assert (env["DATABASE_SECRET_ARN"], env["DATABASE_IAM_AUTH"]) == ("arn:db", "false")


def test_unknown_names_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"known: .*IngestFunction"):
        template.function_spec(open_real_template(), "Ingest")
    with pytest.raises(ConfigurationError, match="undeclared parameter"):
        open_real_template(overrides=("NoSuchParameter=1",))


def test_env_vars_file_then_parameters_then_shell_then_template() -> None:
    spec = template.function_spec(open_real_template(), "ProcessorFunction")
    env_file = {
        "ProcessorFunction": {"MAX_ATTEMPTS": 4, "TYPO_QUEUE_URL": "x"},
        "Parameters": {
            "MAX_ATTEMPTS": "9",
            "PROCESSING_QUEUE_URL": "http://q",
            "DATABASE_SECRET_ARN": "arn:s",
            "OTHER_FUNCTIONS_VARIABLE": "y",
        },
    }
    shell = {"RETRY_BASE_SECONDS": "1", "PROCESSING_QUEUE_URL": "http://shell", "PATH": "/x"}

    values, ignored = environment.function_variables(spec, env_file, shell)

    assert values["MAX_ATTEMPTS"] == "4"
    assert values["PROCESSING_QUEUE_URL"] == "http://q"
    assert values["RETRY_BASE_SECONDS"] == "1"
    assert values["RETRY_MAX_SECONDS"] == "3600"
    assert "PATH" not in values
    assert "OTHER_FUNCTIONS_VARIABLE" not in values
    assert ignored == ["TYPO_QUEUE_URL"]


def test_a_resource_whose_absence_means_something_is_empty_unless_given() -> None:
    """The idle ledger's bucket exists only in a deployed stack; locally, empty: no marks, and
    every sweeper run connects. A value from the file still wins."""
    spec = template.function_spec(open_real_template(), "SweeperFunction")
    assert isinstance(spec.environment["IDLE_LEDGER_BUCKET"], template.Unresolved)
    env_file = {
        "Parameters": {
            "PROCESSING_QUEUE_URL": "http://q",
            "DATABASE_SECRET_ARN": "arn:s",
            "OUTBOX_EVENT_BUS_NAME": "bus",
            "PROVIDERS_REGISTRY_ARN": "",
        }
    }
    values, _ = environment.function_variables(spec, env_file, {})
    assert values["IDLE_LEDGER_BUCKET"] == ""
    given = {**env_file, "SweeperFunction": {"IDLE_LEDGER_BUCKET": "a-bucket"}}
    values, _ = environment.function_variables(spec, given, {})
    assert values["IDLE_LEDGER_BUCKET"] == "a-bucket"


def test_the_process_gets_lambdas_variables_and_sdk_settings_but_not_the_shell() -> None:
    spec = template.function_spec(open_real_template(), "SweeperFunction")
    shell = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:5001",
        "AWS_ACCESS_KEY_ID": "k",
        "DATABASE_URL": "postgresql:///mine",
        "PYTHONPATH": "/src",
    }

    env = environment.process_environment(
        spec,
        {"MAX_ATTEMPTS": "8"},
        task_root=Path("/build/Sweeper"),
        region="eu-west-1",
        shell=shell,
    )

    assert env["AWS_ENDPOINT_URL_SQS"] == "http://127.0.0.1:5001"
    assert env["AWS_ACCESS_KEY_ID"] == "k"
    assert "DATABASE_URL" not in env
    assert "PYTHONPATH" not in env
    assert (env["AWS_REGION"], env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]) == ("eu-west-1", "256")
    assert (env["LAMBDA_TASK_ROOT"], env["_HANDLER"]) == ("/build/Sweeper", "app.handler")


def test_a_caller_without_credentials_gets_sams_placeholders(tmp_path: Path) -> None:
    spec = template.function_spec(open_real_template(), "SweeperFunction")

    def environment_for(shell: dict[str, str]) -> dict[str, str]:
        return environment.process_environment(
            spec, {}, task_root=Path("/build/Sweeper"), region="us-east-1", shell=shell
        )

    # As sam local invoke: a local stack (moto) takes any key, and botocore signs nothing
    # without one.
    bare = environment_for({"HOME": str(tmp_path)})
    assert (bare["AWS_ACCESS_KEY_ID"], bare["AWS_SECRET_ACCESS_KEY"]) == (
        "defaultkey",
        "defaultsecret",
    )
    # Credentials of the caller's own (a profile, a credentials file) are never replaced.
    assert "AWS_ACCESS_KEY_ID" not in environment_for({"HOME": str(tmp_path), "AWS_PROFILE": "p"})
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\n")
    assert "AWS_ACCESS_KEY_ID" not in environment_for({"HOME": str(tmp_path)})
