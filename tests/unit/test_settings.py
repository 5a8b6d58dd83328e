import pytest

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.settings import env_int, env_number


def test_unset_or_blank_means_the_default() -> None:
    assert env_int("X", 7, {}) == 7
    assert env_number("X", 2.5, {"X": "  "}) == 2.5


def test_values_are_parsed() -> None:
    assert env_int("X", 7, {"X": " 12 "}) == 12
    assert env_number("X", 1, {"X": "0.25"}) == 0.25


@pytest.mark.parametrize(
    ("raw", "message"),
    [("ten", "X must be a whole number, got 'ten'"), ("1.5", "whole number"), ("0", "positive")],
)
def test_bad_integers_are_refused_by_name(raw: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        env_int("X", 7, {"X": raw})


@pytest.mark.parametrize("raw", ["nan", "-1", "0", "soon"])
def test_bad_numbers_are_refused_by_name(raw: str) -> None:
    with pytest.raises(ConfigurationError, match=r"^X must be"):
        env_number("X", 1, {"X": raw})


def test_os_environ_is_the_default_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_INBOX_TEST_SETTING", "3")
    assert env_int("WEBHOOK_INBOX_TEST_SETTING", 1) == 3
