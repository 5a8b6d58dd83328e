import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from psycopg.conninfo import conninfo_to_dict

from webhook_inbox.errors import ConfigurationError, StoreUnavailable
from webhook_inbox.store import credentials, db

SECRET = {
    "engine": "postgres",
    "username": "inbox_app",
    "password": "p@ss:word/with?chars",
    "host": "proxy.example.internal",
    "port": 5432,
    "dbname": "inbox",
}


@pytest.fixture
def secret_arn(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    db.reset_for_tests()
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="webhook-inbox/db", SecretString=json.dumps(SECRET)
        )["ARN"]
        monkeypatch.setenv("DATABASE_SECRET_ARN", arn)
        yield arn
    db.reset_for_tests()


def test_database_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@h/d")
    monkeypatch.setenv("DATABASE_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:1:secret:x")
    assert credentials.database_conninfo(db.settings()) == "postgresql://u@h/d"


def test_nothing_configured_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_SECRET_ARN", raising=False)
    with pytest.raises(ConfigurationError, match="DATABASE_URL or DATABASE_SECRET_ARN"):
        credentials.database_conninfo(db.settings())


def test_rds_secret_becomes_a_conninfo_with_tls(secret_arn: str) -> None:
    params = conninfo_to_dict(credentials.database_conninfo(db.settings()))
    assert params["user"] == "inbox_app"
    assert params["password"] == SECRET["password"]
    assert params["host"] == "proxy.example.internal"
    assert params["dbname"] == "inbox"
    assert params["sslmode"] == "require"


def test_secret_is_cached(secret_arn: str) -> None:
    credentials.database_conninfo(db.settings())
    boto3.client("secretsmanager").delete_secret(
        SecretId=secret_arn, ForceDeleteWithoutRecovery=True
    )
    assert conninfo_to_dict(credentials.database_conninfo(db.settings()))["user"] == "inbox_app"


def test_iam_auth_replaces_the_password_with_a_token(
    secret_arn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_IAM_AUTH", "true")
    password = conninfo_to_dict(credentials.database_conninfo(db.settings()))["password"]
    assert password != SECRET["password"]
    assert "X-Amz-Signature" in password


def test_secret_missing_fields_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="host"):
        credentials.conninfo_from_rds_secret({"username": "u"})


def test_unreachable_database_is_store_unavailable_within_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DB_CONNECT_TIMEOUT_S", "1")
    # Port 9 on loopback: nothing listens, the connection is refused at once.
    with pytest.raises(StoreUnavailable):
        db.connect("postgresql://nobody@127.0.0.1:9/none")


def test_invalid_timeout_setting_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_STATEMENT_TIMEOUT_MS", "soon")
    with pytest.raises(ConfigurationError, match="DB_STATEMENT_TIMEOUT_MS"):
        db.connect("postgresql://nobody@127.0.0.1:9/none")


@pytest.mark.parametrize(
    ("conninfo", "mode", "expected"),
    [
        ("postgresql://u@db.abc123.us-east-1.rds.amazonaws.com/d", "auto", True),
        ("postgresql://u@inbox.proxy-abc123.us-east-1.rds.amazonaws.com/d", "auto", False),
        ("postgresql://u@inbox.proxy-abc123.us-east-1.rds.amazonaws.com/d", "on", True),
        ("postgresql://u@localhost/d", "off", False),
    ],
)
def test_startup_options_are_never_sent_to_rds_proxy(
    conninfo: str, mode: str, expected: bool
) -> None:
    assert db._send_startup_options(conninfo, mode) is expected


def test_rds_managed_secret_without_host_connects_where_the_deploy_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An RDS-managed `rds!` secret holds username and password only (issue 15)."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    db.reset_for_tests()
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="rds!db-0123", SecretString=json.dumps({"username": "u", "password": "p"})
        )["ARN"]
        monkeypatch.setenv("DATABASE_SECRET_ARN", arn)
        monkeypatch.setenv("DATABASE_HOST", "db.example.internal")
        monkeypatch.setenv("DATABASE_PORT", "6432")
        monkeypatch.setenv("DATABASE_NAME", "inbox")
        params = conninfo_to_dict(credentials.database_conninfo(db.settings()))
    db.reset_for_tests()
    assert (params["host"], params["port"], params["dbname"]) == (
        "db.example.internal",
        "6432",
        "inbox",
    )
    assert (params["user"], params["password"]) == ("u", "p")


def test_empty_location_variables_leave_the_secret_alone(
    secret_arn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("DATABASE_HOST", "DATABASE_PORT", "DATABASE_NAME"):
        monkeypatch.setenv(variable, "")
    params = conninfo_to_dict(credentials.database_conninfo(db.settings()))
    assert (params["host"], params["dbname"]) == ("proxy.example.internal", "inbox")
