from datetime import UTC, datetime, timedelta

import pytest

from webhook_inbox_tools.cli.params import mask_conninfo, when
from webhook_inbox_tools.cli.render import age


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("postgresql://u:pw@h:5432/db", "postgresql://u:****@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgres://u:p%40ss@h/db?password=x&sslmode=require",
         "postgres://u:****@h/db?password=****&sslmode=require"),
        ("host=h user=u password=pw dbname=db", "host=h user=u password=**** dbname=db"),
    ],
)  # fmt: skip
def test_mask_conninfo_hides_passwords(given: str, shown: str) -> None:
    masked = mask_conninfo(given)
    if "://" in given:
        assert masked == shown
    else:  # keyword strings may come back in another order
        assert sorted(masked.split()) == sorted(shown.split())


def test_unparsable_conninfo_is_not_echoed() -> None:
    assert "secret" not in mask_conninfo("host='secret")


def test_when_accepts_ages_and_iso_times() -> None:
    assert abs(datetime.now(UTC) - timedelta(hours=2) - when("2h")) < timedelta(seconds=5)
    assert when("2026-05-01T12:00") == datetime(2026, 5, 1, 12, tzinfo=UTC)


def test_age_is_short() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert age(now - timedelta(seconds=42), now=now) == "42s"
    assert age(now - timedelta(minutes=3, seconds=5), now=now) == "3m05s"
    assert age(now - timedelta(days=4, hours=3), now=now) == "4d03h"


def test_operator_defaults_to_user_then_login_name_at_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass
    import os
    import socket

    from webhook_inbox_tools.cli.params import operator_name

    def no_passwd_entry() -> str:
        raise OSError("no passwd entry")

    monkeypatch.setenv("USER", "alice")
    assert operator_name(None) == "alice"
    assert operator_name("bob") == "bob"
    # A container without $USER: the login name (or uid) at the host name, never an error.
    monkeypatch.delenv("USER")
    monkeypatch.delenv("LOGNAME", raising=False)
    assert operator_name(None) == f"{getpass.getuser()}@{socket.gethostname()}"
    monkeypatch.setattr(getpass, "getuser", no_passwd_entry)
    assert operator_name(None) == f"uid-{os.getuid()}@{socket.gethostname()}"
