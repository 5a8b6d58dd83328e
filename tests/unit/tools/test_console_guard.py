"""The console's gate: host, origin and token rules, as pure functions of a request's headers."""

from __future__ import annotations

from email.message import Message

import pytest

from webhook_inbox_tools.console.guard import Gate

PORT = 43210
HOST = f"127.0.0.1:{PORT}"
ORIGIN = f"http://{HOST}"


def headers(**values: str) -> Message:
    """Headers as http.server hands them over (case-insensitive lookups)."""
    message = Message()
    for name, value in values.items():
        message[name.replace("_", "-")] = value
    return message


@pytest.fixture
def gate() -> Gate:
    return Gate(PORT, token="the-one-time-token")


def cookie(gate: Gate, value: str | None = None) -> str:
    return f"other=1; {gate.cookie_name}={value if value is not None else gate.token}"


def test_the_printed_url_holds_the_token_and_binds_loopback(gate: Gate) -> None:
    assert gate.url("/events") == f"http://{HOST}/events?token=the-one-time-token"


def test_the_token_is_exchanged_for_a_strict_httponly_cookie_and_leaves_the_url(
    gate: Gate,
) -> None:
    verdict = gate.check(
        "GET", "/events?status=failed&token=the-one-time-token", headers(Host=HOST)
    )
    assert verdict.status == 303
    assert verdict.location == "/events?status=failed"
    assert verdict.set_cookie is not None
    assert verdict.set_cookie.startswith(f"{gate.cookie_name}=the-one-time-token;")
    assert "HttpOnly" in verdict.set_cookie
    assert "SameSite=Strict" in verdict.set_cookie


def test_the_cookie_lets_the_browser_in(gate: Gate) -> None:
    assert gate.check("GET", "/events", headers(Host=HOST, Cookie=cookie(gate))).allowed
    assert gate.check("GET", "/", headers(Host=f"localhost:{PORT}", Cookie=cookie(gate))).allowed


@pytest.mark.parametrize(
    ("target", "cookie_value"),
    [
        ("/events", None),  # neither
        ("/events?token=wrong", None),
        ("/events?token=", None),
        ("/events", "wrong"),
        ("/events", ""),
        ("/events", "the-one-time-token-and-more"),
    ],
)
def test_without_the_token_nothing_is_served(
    gate: Gate, target: str, cookie_value: str | None
) -> None:
    sent = (
        headers(Host=HOST)
        if cookie_value is None
        else headers(Host=HOST, Cookie=cookie(gate, cookie_value))
    )
    verdict = gate.check("GET", target, sent)
    assert verdict.status == 403
    assert verdict.set_cookie is None


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",  # DNS rebinding: the attacker's name resolving to 127.0.0.1
        f"evil.example:{PORT}",
        "127.0.0.1",  # no port
        f"127.0.0.1:{PORT + 1}",
        f"0.0.0.0:{PORT}",
        f"[::1]:{PORT}",
        "",
    ],
)
def test_other_hosts_are_refused_even_with_the_token(gate: Gate, host: str) -> None:
    verdict = gate.check("GET", "/events?token=the-one-time-token", headers(Host=host))
    assert verdict.status == 403
    assert "127.0.0.1 and localhost" in verdict.reason
    assert gate.check("GET", "/events", headers(Host=host, Cookie=cookie(gate))).status == 403


@pytest.mark.parametrize(
    "origin", ["http://evil.example", f"http://127.0.0.1:{PORT + 1}", f"https://{HOST}", "null"]
)
def test_another_origin_is_refused_for_reads_and_actions(gate: Gate, origin: str) -> None:
    for method in ("GET", "POST"):
        verdict = gate.check(
            method, "/pause", headers(Host=HOST, Origin=origin, Cookie=cookie(gate))
        )
        assert verdict.status == 403, method
        assert "cross-origin" in verdict.reason


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_cross_site_fetches_are_refused(gate: Gate, site: str) -> None:
    # same-site: a page on another localhost port is the same site as this one.
    sent = headers(Host=HOST, Cookie=cookie(gate), Sec_Fetch_Site=site)
    assert gate.check("GET", "/events", sent).status == 403


@pytest.mark.parametrize("site", ["same-origin", "none"])
def test_own_pages_and_typed_urls_pass(gate: Gate, site: str) -> None:
    sent = headers(Host=HOST, Cookie=cookie(gate), Sec_Fetch_Site=site)
    assert gate.check("GET", "/events", sent).allowed


def test_an_action_needs_its_origin(gate: Gate) -> None:
    without = gate.check("POST", "/replay", headers(Host=HOST, Cookie=cookie(gate)))
    assert without.status == 403
    assert "Origin" in without.reason
    with_origin = headers(Host=HOST, Cookie=cookie(gate), Origin=ORIGIN)
    assert gate.check("POST", "/replay", with_origin).allowed


def test_the_token_is_not_taken_from_a_post(gate: Gate) -> None:
    sent = headers(Host=HOST, Origin=ORIGIN)
    assert gate.check("POST", "/pause?token=the-one-time-token", sent).status == 403


def test_each_gate_makes_its_own_long_token() -> None:
    first, second = Gate(PORT), Gate(PORT)
    assert first.token != second.token
    assert len(first.token) >= 40
