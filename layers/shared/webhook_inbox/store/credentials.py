"""How to sign in to the database: the connection string from the settings or the secret.

Credentials come from ``DATABASE_URL`` or the RDS-shaped secret ``DATABASE_SECRET_ARN``, cached
five minutes (the last good value is kept while Secrets Manager cannot be read). When the
database refuses a login — a rotation changed the password, or switched to the other user — the
connection module calls :func:`reread_secret_after_refusal` and tries once more; the re-read
happens at most once a minute, so a broken configuration cannot turn every request into a
Secrets Manager call.

The settings (:class:`webhook_inbox.settings.DatabaseSettings`) are passed in by the caller: this
module sits below the connection module and does not import it.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from webhook_inbox import aws
from webhook_inbox.errors import ConfigurationError, SecretUnavailable

if TYPE_CHECKING:
    from webhook_inbox.settings import DatabaseSettings

_SECRET_TTL_S = 300.0
# A refused login re-reads the database secret at most this often (as for provider secrets).
FORCED_SECRET_REFRESH_INTERVAL_S = 60.0

_secret_cache: dict[str, tuple[float, dict[str, Any]]] = {}
_secret_last_forced: dict[str, float] = {}
_secret_lock = threading.Lock()


def _fetch_secret(arn: str) -> dict[str, Any]:
    from botocore.exceptions import BotoCoreError, ClientError  # deferred, as boto3 is

    try:
        raw = aws.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
    except (BotoCoreError, ClientError, KeyError) as exc:
        raise SecretUnavailable(f"cannot read database secret: {aws.error_code(exc)}") from exc
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigurationError("database secret is not JSON") from None
    if not isinstance(value, dict):
        raise ConfigurationError("database secret must be a JSON object")
    return value


def _read_secret(arn: str) -> dict[str, Any]:
    with _secret_lock:
        cached = _secret_cache.get(arn)
        if cached and time.monotonic() - cached[0] < _SECRET_TTL_S:
            return cached[1]
        try:
            value = _fetch_secret(arn)
        except SecretUnavailable:
            if cached:  # keep connecting with the last good value while Secrets Manager is out
                return cached[1]
            raise
        _secret_cache[arn] = (time.monotonic(), value)
        return value


def reread_secret_after_refusal(configured: DatabaseSettings) -> bool:
    """Re-read the database secret now (a login was refused); whether it changed.

    At most once a minute per secret: a refusal that a re-read cannot cure (a disabled user, a
    secret rotated wrongly) must not cost a Secrets Manager call per request.
    """
    arn = configured.secret_arn
    if configured.url or not arn:
        return False
    with _secret_lock:
        now = time.monotonic()
        last = _secret_last_forced.get(arn)
        if last is not None and now - last < FORCED_SECRET_REFRESH_INTERVAL_S:
            return False
        _secret_last_forced[arn] = now
        try:
            value = _fetch_secret(arn)
        except SecretUnavailable:
            return False  # keep the cached value; the caller reports the refusal
        cached = _secret_cache.get(arn)
        _secret_cache[arn] = (now, value)
        return cached is None or cached[1] != value


def forget_secrets() -> None:
    """Drop every cached secret and re-read timestamp (``db.reset_for_tests`` calls this)."""
    with _secret_lock:
        _secret_cache.clear()
        _secret_last_forced.clear()


def conninfo_from_rds_secret(secret: dict[str, Any], *, password: str | None = None) -> str:
    """Build a libpq URI from the RDS secret JSON shape (username, password, host, port, dbname)."""
    try:
        user = str(secret["username"])
        host = str(secret["host"])
    except KeyError as missing:
        raise ConfigurationError(f"database secret lacks {missing.args[0]!r}") from None
    port = int(secret.get("port", 5432))
    dbname = str(secret.get("dbname", "postgres"))
    pw = password if password is not None else str(secret.get("password", ""))
    return (
        f"postgresql://{quote(user, safe='')}:{quote(pw, safe='')}@{host}:{port}/"
        f"{quote(dbname, safe='')}?sslmode={secret.get('sslmode', 'require')}"
    )


def _iam_token(host: str, port: int, user: str) -> str:
    token: str = aws.client("rds").generate_db_auth_token(
        DBHostname=host, Port=port, DBUsername=user
    )
    return token


def _with_location_overrides(
    secret: dict[str, Any], configured: DatabaseSettings
) -> dict[str, Any]:
    """The secret, with ``DATABASE_HOST`` / ``DATABASE_PORT`` / ``DATABASE_NAME`` where set.

    An RDS-managed ``rds!`` secret holds only the username and password, so the deploy passes
    where to connect beside it.
    """
    located = dict(secret)
    for value, key in (
        (configured.host, "host"),
        (configured.port, "port"),
        (configured.name, "dbname"),
    ):
        if value:
            located[key] = value
    return located


def database_conninfo(configured: DatabaseSettings) -> str:
    """Where to connect: ``DATABASE_URL``, else the RDS-shaped secret ``DATABASE_SECRET_ARN``.

    With ``DATABASE_IAM_AUTH=true`` the secret's password is replaced by an IAM auth token
    (valid 15 minutes; a new one is made for every new connection).
    """
    if configured.url:
        return configured.url
    if not configured.secret_arn:
        raise ConfigurationError("set DATABASE_URL or DATABASE_SECRET_ARN")
    secret = _with_location_overrides(_read_secret(configured.secret_arn), configured)
    if configured.iam_auth:
        host = str(secret.get("host", ""))
        port = int(secret.get("port", 5432))
        token = _iam_token(host, port, str(secret.get("username", "")))
        return conninfo_from_rds_secret(secret, password=token)
    return conninfo_from_rds_secret(secret)
