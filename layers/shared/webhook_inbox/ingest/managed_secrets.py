"""Provider secrets kept in Secrets Manager (``{"secret_arn": …}``), cached per process.

Values are cached for five minutes; a signature that no cached secret reproduces may force one
refresh, at most once a minute per secret, so bad traffic cannot hammer Secrets Manager. While
Secrets Manager is unavailable the last good value keeps serving.
"""

from __future__ import annotations

import json
import threading
import time

from webhook_inbox import aws
from webhook_inbox.errors import ConfigurationError, SecretUnavailable

SECRET_TTL_S = 300.0
FORCED_REFRESH_INTERVAL_S = 60.0


class _ManagedSecrets:
    """Secrets Manager values cached per ARN, shared by every provider in the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str | None], tuple[float, str]] = {}
        self._last_forced: dict[tuple[str, str | None], float] = {}

    def _fetch(self, arn: str, json_key: str | None) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            secrets = aws.client("secretsmanager")  # boto3 is imported on this first use
            raw: str = secrets.get_secret_value(SecretId=arn)["SecretString"]
        except (BotoCoreError, ClientError, KeyError) as exc:
            raise SecretUnavailable(f"cannot read provider secret: {aws.error_code(exc)}") from exc
        if json_key is None:
            return raw
        try:
            value = json.loads(raw)[json_key]
        except (ValueError, TypeError, KeyError):
            raise ConfigurationError(f"provider secret has no JSON key {json_key!r}") from None
        if not isinstance(value, str) or not value:
            raise ConfigurationError(f"provider secret key {json_key!r} is not a string")
        return value

    def get(self, arn: str, json_key: str | None) -> str:
        key = (arn, json_key)
        with self._lock:
            cached = self._values.get(key)
            if cached and time.monotonic() - cached[0] < SECRET_TTL_S:
                return cached[1]
            try:
                value = self._fetch(arn, json_key)
            except SecretUnavailable:
                if cached:  # serve the last good value while Secrets Manager is unavailable
                    return cached[1]
                raise
            self._values[key] = (time.monotonic(), value)
            return value

    def force_refresh(self, arn: str, json_key: str | None) -> bool:
        """Re-read one secret now, unless that was done less than a minute ago."""
        key = (arn, json_key)
        with self._lock:
            now = time.monotonic()
            last = self._last_forced.get(key)
            if last is not None and now - last < FORCED_REFRESH_INTERVAL_S:
                return False
            self._last_forced[key] = now
            try:
                value = self._fetch(arn, json_key)
            except SecretUnavailable:
                return False  # keep what we have; the caller answers with the original 401
            changed = self._values.get(key, (0.0, None))[1] != value
            self._values[key] = (now, value)
            return changed

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._last_forced.clear()
        aws.reset()  # a fresh client for the next read (tests switch moto mocks)


MANAGED_SECRETS = _ManagedSecrets()
