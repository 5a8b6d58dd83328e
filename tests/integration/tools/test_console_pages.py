"""`webhook-inbox console`'s server over this test's database (the CLI's local backend, the
operator commands' own code): real HTTP on loopback, the gate in front, pages that find, show
and act — each action's effect asserted in the database and in its audit row."""

from __future__ import annotations

import argparse
import http.client
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

from tests.integration.cli.conftest import seed_event
from webhook_inbox_tools.cli.operator_backend import LocalBackend
from webhook_inbox_tools.console.pages import Pages
from webhook_inbox_tools.console.server import ConsoleServer


class Browser:
    """Just enough of a browser: its cookie, its Host and, for POSTs, its Origin."""

    def __init__(self, server: ConsoleServer) -> None:
        self.server = server
        self.host = f"127.0.0.1:{server.port}"
        self.cookie = ""

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None, **headers: str
    ) -> tuple[int, dict[str, str], str]:
        sent = {"Host": self.host, **({"Cookie": self.cookie} if self.cookie else {})}
        if method == "POST":
            sent["Origin"] = f"http://{self.host}"
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        sent.update({k.replace("_", "-"): v for k, v in headers.items()})
        body = urlencode(form or {}).encode() if method == "POST" else None
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=10)
        try:
            connection.request(method, path, body=body, headers=sent)
            reply = connection.getresponse()
            return reply.status, dict(reply.getheaders()), reply.read().decode()
        finally:
            connection.close()

    def log_in(self) -> None:
        status, headers, _ = self.request("GET", f"/events?token={self.server.gate.token}")
        assert status == 303
        self.cookie = headers["Set-Cookie"].split(";")[0]


@pytest.fixture
def browser(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    monkeypatch.delenv("PROCESSING_QUEUE_URL", raising=False)
    backend = LocalBackend(argparse.Namespace(database_url=database_url, operator="alice"))
    server = ConsoleServer(Pages(backend), 0, quiet=True)
    server.start()
    try:
        found = Browser(server)
        found.log_in()
        yield found
    finally:
        server.shutdown()
        server.server_close()
        backend.close()


def test_every_response_carries_the_security_headers(browser: Browser) -> None:
    status, headers, _ = browser.request("GET", "/events")
    assert status == 200
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["Cache-Control"] == "no-store"


def test_without_the_cookie_or_from_another_host_nothing_is_served(browser: Browser) -> None:
    cookie, browser.cookie = browser.cookie, ""
    assert browser.request("GET", "/events")[0] == 403
    assert browser.request("GET", "/static/console.css")[0] == 403
    browser.cookie = cookie
    assert browser.request("GET", "/events", Host="rebound.example")[0] == 403
    status, _, body = browser.request(
        "POST", "/pause", {"provider": "stripe", "reason": "x"}, Origin="http://evil.example"
    )
    assert (status, body) == (403, "cross-origin requests are refused")


def test_static_files_are_served_only_from_the_package(browser: Browser) -> None:
    status, headers, body = browser.request("GET", "/static/vendor/htmx-2.0.11.min.js")
    assert status == 200
    assert headers["Content-Type"].startswith("text/javascript")
    assert "htmx" in body
    for path in ("/static/../pages.py", "/static/%2e%2e/pages.py", "/static/templates/base.html",
                 "/static/nothing.js", "/static/"):  # fmt: skip
        assert browser.request("GET", path)[0] == 404, path


def test_the_list_filters_searches_and_pages_by_cursor(
    browser: Browser, conn: psycopg.Connection[Any]
) -> None:
    for i in range(3):
        seed_event(conn, f"evt_{i}", status="failed", attempts=1, error="boom")
    seed_event(conn, "gh_1", provider="github", event_type="push", status="processed")
    conn.execute("UPDATE webhook_events SET delivery_id = 'dlv-42' WHERE event_id = 'gh_1'")

    # Ids carry their day (the inbox is partitioned by day): newest first.
    third, second, first = (
        str(r[0])
        for r in conn.execute(
            "SELECT id FROM webhook_events WHERE provider = 'stripe' ORDER BY id DESC"
        ).fetchall()
    )
    _, _, page = browser.request("GET", "/events?status=failed&provider=stripe")
    assert re.findall(r'data-row="(\d+)"', page) == [third, second, first]
    assert "gh_1" not in page
    # By the provider's delivery id: straight to the event's own page.
    status, headers, _ = browser.request("GET", "/events?q=dlv-42")
    assert (status, headers["Location"]) == (303, "/events/github/gh_1")
    status, headers, _ = browser.request("GET", "/events/github/dlv-42")
    assert (status, headers["Location"]) == (303, "/events/github/gh_1")
    # A cursor page is the older rows, and is not live (it would jump back to the newest).
    rows = browser.request("GET", f"/events?cursor={third}")[2]
    assert re.findall(r'data-row="(\d+)"', rows) == [second, first]
    assert "hx-trigger" not in rows.split('id="rows"')[1].split(">")[0]
    # htmx's live refresh gets only the rows.
    fragment = browser.request("GET", "/events?status=failed", HX_Request="true")[2]
    assert fragment.startswith('<div id="rows"')
    assert "<html" not in fragment


def test_a_bad_filter_is_a_400_that_says_why(browser: Browser) -> None:
    status, _, body = browser.request("GET", "/events?since=yesterday-ish")
    assert status == 400
    assert "since" in body
    assert browser.request("GET", "/events?status=lost")[0] == 400
    assert browser.request("GET", "/events/stripe/evt_missing")[0] == 404


def test_replay_previews_then_replays_and_the_audit_names_the_operator(
    browser: Browser, conn: psycopg.Connection[Any]
) -> None:
    row = seed_event(conn, "evt_dead", status="dead_letter", attempts=8, error="boom")
    form = {"provider": "stripe", "id": "evt_dead", "reason": "handler fixed"}

    status, _, preview = browser.request("POST", "/replay", {**form, "step": "preview"})
    assert status == 200
    assert "would_replay" in preview
    assert conn.execute("SELECT status FROM webhook_events WHERE id = %s", (row,)).fetchone() == (
        "dead_letter",
    )
    status, _, done = browser.request("POST", "/replay", {**form, "step": "confirm"})
    assert status == 200
    assert "replayed" in done
    assert conn.execute(
        "SELECT status, attempts FROM webhook_events WHERE id = %s", (row,)
    ).fetchone() == ("received", 0)
    audit = conn.execute(
        "SELECT action, operator, reason, previous_attempts FROM operator_actions"
        " WHERE event_row_id = %s",
        (row,),
    ).fetchall()
    assert audit == [("replay", "alice", "handler fixed", 8)]
    # The event page shows the replay's audit row.
    page = browser.request("GET", "/events/stripe/evt_dead")[2]
    assert "handler fixed" in page


def test_a_replay_without_a_reason_is_refused(
    browser: Browser, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_x", status="dead_letter", attempts=8)
    status, _, body = browser.request(
        "POST", "/replay", {"provider": "stripe", "id": "evt_x", "reason": " ", "step": "confirm"}
    )
    assert status == 400
    assert "reason" in body
    assert conn.execute("SELECT count(*) FROM operator_actions").fetchone() == (0,)


def test_a_filtered_replay_confirms_only_the_rows_it_previewed(
    browser: Browser, conn: psycopg.Connection[Any]
) -> None:
    first = [seed_event(conn, f"evt_{i}", status="dead_letter", attempts=8) for i in range(2)]
    form = {"status": "dead_letter", "reason": "bus fixed", "max": "10"}
    preview = browser.request("POST", "/replay", {**form, "step": "preview"})[2]
    only = re.search(r'name="only_rows" value="([\d,]+)"', preview)
    assert only is not None
    assert sorted(int(r) for r in only[1].split(",")) == first
    late = seed_event(conn, "evt_late", status="dead_letter", attempts=8)  # after the preview
    browser.request("POST", "/replay", {**form, "only_rows": only[1], "step": "confirm"})
    statuses = dict(conn.execute("SELECT id, status FROM webhook_events").fetchall())
    assert statuses == {first[0]: "received", first[1]: "received", late: "dead_letter"}


def test_pause_and_resume_from_the_health_page(
    browser: Browser, conn: psycopg.Connection[Any]
) -> None:
    status, _, body = browser.request(
        "POST", "/pause", {"provider": "stripe", "type": "*", "reason": "vendor incident"}
    )
    assert status == 200
    assert "Paused" in body
    assert conn.execute("SELECT paused_by, reason FROM handler_pauses").fetchall() == [
        ("alice", "vendor incident")
    ]
    assert 'data-key="stripe *"' in browser.request("GET", "/health")[2]
    # Twice: the operator command's conflict, as a page.
    again = browser.request("POST", "/pause", {"provider": "stripe", "reason": "again"})
    assert again[0] == 409
    status, _, body = browser.request("POST", "/resume", {"provider": "stripe", "type": "*"})
    assert (status, "Resumed" in body) == (200, True)
    assert conn.execute("SELECT resumed_by FROM handler_pauses").fetchall() == [("alice",)]


def test_the_payload_is_shown_only_when_asked_for(
    browser: Browser, conn: psycopg.Connection[Any]
) -> None:
    seed_event(conn, "evt_secret_payload")
    page = browser.request("GET", "/events/stripe/evt_secret_payload")[2]
    assert '"type": "customer.created"' not in page
    status, _, shown = browser.request("POST", "/events/stripe/evt_secret_payload/payload")
    assert status == 200
    assert "&#34;type&#34;: &#34;customer.created&#34;" in shown


def test_health_json_samples_the_backlog(browser: Browser, conn: psycopg.Connection[Any]) -> None:
    seed_event(conn, "a", status="failed", attempts=1)
    seed_event(conn, "b")
    status, headers, body = browser.request("GET", "/health.json")
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    point = json.loads(body)
    assert point["counts"]["failed"] == 1
    assert point["counts"]["received"] == 1
    assert point["oldest_unfinished_age_s"] >= 0


def test_a_page_that_fails_answers_500_and_the_console_keeps_serving(
    browser: Browser, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise KeyError("a field the page expected")

    with monkeypatch.context() as patched:
        patched.setattr(browser.server.pages, "events", broken)
        status, _, body = browser.request("GET", "/events")
    assert status == 500
    assert "a field the page expected" not in body
    # The terminal names the kind and the place, never the message.
    said = capsys.readouterr().err
    assert "GET /events failed: KeyError at test_console_pages.py:" in said
    assert "a field the page expected" not in said
    assert browser.request("GET", "/events")[0] == 200


def test_health_shows_each_providers_traffic_refusals_and_arrivals_in_a_window(
    database_url: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook_inbox_tools.console import rejections
    from webhook_inbox_tools.dev import refusals

    for i in range(3):
        seed_event(conn, f"evt_{i}")
    seed_event(conn, "gh_old", provider="github", event_type="push")
    conn.execute("UPDATE webhook_events SET delivery_count = 3 WHERE event_id = 'evt_0'")
    conn.execute(
        "UPDATE webhook_events SET received_at = now() - interval '3 days',"
        " last_delivery_at = now() - interval '3 days' WHERE event_id = 'gh_old'"
    )
    refusals.create_table(conn)
    recorder = refusals.Recorder(database_url)
    for provider, reason in (("stripe", "signature"), ("stripe", "signature"), ("github", "stale")):
        recorder.record(provider, 401, {"reason": reason})

    backend = LocalBackend(argparse.Namespace(database_url=database_url, operator="alice"))
    pages = Pages(backend, refused=rejections.from_dev_database(database_url))
    server = ConsoleServer(pages, 0, quiet=True)
    server.start()
    try:
        browser = Browser(server)
        browser.log_in()
        page = browser.request("GET", "/health")[2]
        rows = re.findall(
            r'data-provider="(\w+)"><td>.*?</td><td>(\d+)</td><td>(\d+)</td><td>(\S+?)</td>', page
        )
        # github's one event is older than the window; its refusal is not.
        assert rows == [("github", "0", "0", "1"), ("stripe", "3", "2", "2")]
        reasons = page.split('id="reasons"')[1].split("</table>")[0]
        assert re.findall(r"<td>(\w+)</td><td>(\w+)</td><td>(\d+)</td>", reasons) == [
            ("stripe", "signature", "2"), ("github", "stale", "1"),
        ]  # fmt: skip
        plot = json.loads(page.split('id="arrivals-data">')[1].split("</script>")[0])
        assert [s["provider"] for s in plot["series"]] == ["stripe"]
        assert sum(plot["series"][0]["counts"]) == 3
        assert len(plot["x"]) == len(plot["series"][0]["counts"]) == 49  # 24 h in 30 min
        week = browser.request("GET", "/health?window=7d")[2]
        assert re.search(r'data-provider="github"><td>.*?</td><td>1</td>', week)
        assert browser.request("GET", "/health?window=1y")[0] == 400
    finally:
        server.shutdown()
        server.server_close()
        backend.close()


def test_without_a_source_of_refusals_the_page_says_so(browser: Browser) -> None:
    page = browser.request("GET", "/health")[2]
    assert "refused deliveries are counted by dev and by a stack&#39;s metrics only" in page


def test_a_dead_outbox_message_is_retried_from_its_events_page(
    browser: Browser, conn: psycopg.Connection[Any]
) -> None:
    from tests.integration.cli.conftest import seed_outbox

    source = seed_event(conn, "evt_src", status="processed")
    dead = seed_outbox(conn, "k-dead", status="dead", attempts=10)
    conn.execute("UPDATE outbox_messages SET source_event_id = %s WHERE id = %s", (source, dead))

    page = browser.request("GET", "/events/stripe/evt_src")[2]
    assert f'action="/outbox/{dead}/retry"' in page
    form = {"reason": "bus policy fixed"}
    preview = browser.request("POST", f"/outbox/{dead}/retry", {**form, "step": "preview"})[2]
    assert "would_retry" in preview
    assert conn.execute("SELECT status FROM outbox_messages WHERE id = %s", (dead,)).fetchone() == (
        "dead",
    )
    status, _, done = browser.request("POST", f"/outbox/{dead}/retry", {**form, "step": "confirm"})
    assert (status, "retried" in done) == (200, True)
    assert conn.execute(
        "SELECT status, attempts FROM outbox_messages WHERE id = %s", (dead,)
    ).fetchone() == ("pending", 0)
    assert conn.execute(
        "SELECT action, operator, reason FROM operator_actions WHERE outbox_id = %s", (dead,)
    ).fetchall() == [("outbox_retry", "alice", "bus policy fixed")]
    # Not a number, not a page: refused before any command.
    assert browser.request("POST", "/outbox/abc/retry", form)[0] == 400
