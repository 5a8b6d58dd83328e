"""Argument types and environment look-ups shared by the CLI commands."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import socket
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from webhook_inbox import config
from webhook_inbox.errors import ConfigurationError

_RELATIVE = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_PROVIDER = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def when(text: str) -> datetime:
    """A point in time: ISO 8601 (UTC when no offset is given) or an age such as 30m, 2h, 7d."""
    match = _RELATIVE.match(text.strip())
    if match:
        amount, unit = int(match[1]), match[2]
        return datetime.now(UTC) - timedelta(**{_UNITS[unit]: amount})
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO time (2026-05-01T12:00) nor an age (30m, 2h, 7d)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def provider_name(text: str) -> str:
    if not _PROVIDER.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a provider name (lower-case letters, digits, '-' and '_')"
        )
    return text


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def port_number(text: str) -> int:
    """A TCP port, or 0 for any free one."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535)")
    return value


def page_limit(text: str) -> int:
    value = positive_int(text)
    if value > 1000:
        raise argparse.ArgumentTypeError("at most 1000 rows per page")
    return value


def operator_name(explicit: str | None) -> str:
    """Who is acting, for the audit trail: --operator, else $USER, else the account and host.

    Containers often run without $USER; the login name from the password database (or the
    numeric uid) at the host name still says who acted, and is what the audit row records.
    """
    name = (explicit or config.env("USER") or "").strip()
    if not name:
        name = f"{_login_name()}@{socket.gethostname()}"
    if len(name) > 200:
        raise ConfigurationError("--operator is limited to 200 characters")
    return name


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no passwd entry for this uid (common in containers)
        return f"uid-{os.getuid()}"


def reason_text(text: str) -> str:
    text = text.strip()
    if not text:
        raise argparse.ArgumentTypeError("a reason cannot be empty")
    if len(text) > 1000:
        raise argparse.ArgumentTypeError("a reason is limited to 1000 characters")
    return text


def mask_conninfo(conninfo: str) -> str:
    """The connection string with any password replaced by ****, safe to print."""
    if conninfo.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(conninfo)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":****"
            netloc = f"{userinfo}@{host}"
        query = [
            (k, "****" if k == "password" else v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ]
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="/*")))
    try:
        params = conninfo_to_dict(conninfo)
    except (
        psycopg.ProgrammingError
    ):  # unparsable: say so rather than echo it (it may hold a secret)
        return "<unparsable connection string>"
    if "password" in params:
        params["password"] = "****"  # noqa: S105 - a mask, not a password
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})
