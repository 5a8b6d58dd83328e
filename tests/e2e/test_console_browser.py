"""`webhook-inbox console` in a real browser (headless Chromium through Selenium and
chromedriver, both Debian's) over a real `webhook-inbox dev`: open the printed URL, find an
event by its provider's delivery id, replay one and watch the replay reach its audit trail and
its status without a reload, pause and resume a provider from the health page, and see the
console refuse a browser without the token and a page of another origin. The main pages'
screenshots are taken on the way (``WEBHOOK_INBOX_SCREENSHOTS=docs/images`` writes the README's).

Without chromium and chromedriver the test skips and says how to install them; .ci/run installs
them and sets WEBHOOK_INBOX_REQUIRE_BROWSER=1, which turns that skip into a failure. Waits are
on what the page shows (WebDriverWait on the DOM), or on the database for effects.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.dev_support import DevProcess, clean_env, post, wait_until
from tests.e2e.test_dev_lifecycle import start, started
from tests.e2e.test_dev_trigger_and_console import row, run
from tests.integration.cli.conftest import CONSOLE_SCRIPT

__all__ = ["started"]  # the fixture, imported for pytest

INSTALL_HINT = (
    "the console's browser tests need Chromium and its driver: `sudo apt-get install chromium "
    "chromium-driver` (Debian/Ubuntu) and `pip install -e '.[dev]'` (Selenium)"
)
WAIT_S = 30


def _browser_parts() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if chromium is None:
        missing.append("chromium")
    if driver is None:
        missing.append("chromedriver")
    if missing:
        message = f"no {', '.join(missing)}: {INSTALL_HINT}"
        if os.environ.get("WEBHOOK_INBOX_REQUIRE_BROWSER") == "1":  # set by .ci/run
            pytest.fail(message)
        pytest.skip(message)
    assert chromium is not None
    assert driver is not None
    return chromium, driver


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    chromium, driver_path = _browser_parts()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1360,1000", "--no-first-run", "--disable-gpu"):  # fmt: skip
        options.add_argument(flag)
    # Its profile in this test's folder: left to itself it makes one in the temp folder that
    # outlives it.
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


class Console:
    """`webhook-inbox console --no-browser` as a user starts it, in dev's folder."""

    def __init__(self, folder: Path) -> None:
        self.proc = subprocess.Popen(
            [str(CONSOLE_SCRIPT), "console", "--no-browser"],
            cwd=folder, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.url = ""
        for line in self.proc.stdout:  # the URL is its second line
            found = re.search(r"open (http://127\.0\.0\.1:\d+/events\?token=\S+)", line)
            if found:
                self.url = found[1]
                break
        assert self.url, "the console printed no URL"
        self.base = self.url.split("/events")[0]
        # Drain the rest (request lines) so the pipe never fills.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def dev_and_console(
    started: list[DevProcess], tmp_path: Path
) -> Iterator[tuple[str, str, Console]]:
    dev = start(started, cwd=tmp_path)
    port = dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1]
    database_url = dev.wait_for(r"DATABASE_URL=(\S+)")[1]
    dev.wait_for(r"ready; Ctrl-C stops everything")
    console = Console(tmp_path)
    try:
        yield f"http://127.0.0.1:{port}", database_url, console
    finally:
        console.stop()


def _shots() -> Path | None:
    folder = os.environ.get("WEBHOOK_INBOX_SCREENSHOTS")
    return Path(folder) if folder else None


def _screenshot(driver: Any, name: str, tmp_path: Path) -> None:
    folder = _shots() or tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"console-{name}.png"
    driver.execute_script("window.scrollTo(0, 0)")  # the page as it opens, not where we clicked
    assert driver.save_screenshot(str(path)), path
    assert path.stat().st_size > 10_000  # a page, not a blank


def _triggered(folder: Path, *argv: str) -> str:
    done = run("trigger", *argv, cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"\] (\S+) -> 202 Accepted", done.stdout)
    assert found, done.stdout
    return found[1]


def test_find_replay_pause_and_resume_in_a_browser_and_refuse_strangers(
    dev_and_console: tuple[str, str, Console], browser: Any, tmp_path: Path
) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    dev_url, database_url, console = dev_and_console
    folder = tmp_path  # dev's folder, where trigger finds it
    wait = WebDriverWait(browser, WAIT_S, ignored_exceptions=(StaleElementReferenceException,))

    def click(locator: tuple[str, str]) -> None:
        """Click what may be swapped by a live refresh between finding and clicking it."""
        wait.until(lambda d: d.find_element(*locator).click() or True)

    stripe_id = _triggered(folder, "stripe", "customer.created")
    _triggered(folder, "github", "push")
    _triggered(folder, "example", "subscription.updated")
    wait_until(
        lambda: row(database_url, "SELECT count(*) FROM webhook_events "
                    "WHERE status IN ('processed', 'ignored')") == (3,),
        WAIT_S, "three events done",
    )  # fmt: skip
    github_event, delivery_id = row(
        database_url, "SELECT event_id, delivery_id FROM webhook_events WHERE provider = 'github'"
    )
    assert delivery_id

    # The printed URL: in, with the token exchanged for a cookie and gone from the address bar.
    browser.get(console.url)
    wait.until(seen.title_contains("Events"))
    assert "token" not in browser.current_url
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr[data-row]")) == 3
    # Live: a new arrival shows up without a reload.
    late = _triggered(folder, "stripe", "customer.created")
    wait.until(seen.presence_of_element_located((By.LINK_TEXT, late)))
    _screenshot(browser, "events", tmp_path)

    # Find by the provider's delivery id, as a customer quotes it: straight to the event.
    search = browser.find_element(By.ID, "q")
    search.send_keys(delivery_id)
    search.submit()
    wait.until(seen.url_contains(f"/events/github/{github_event.replace(':', '%3A')}"))
    assert browser.find_element(By.ID, "event-status").text == "ignored"

    # Replay the stripe event: preview first, then confirm; its new run appears by itself.
    browser.get(f"{console.base}/events/stripe/{stripe_id}")
    browser.find_element(By.ID, "replay-reason").send_keys("trying the console")
    click((By.XPATH, "//button[text()='Preview replay']"))
    confirm = wait.until(seen.element_to_be_clickable((By.XPATH, "//button[@value='confirm']")))
    assert "would_replay" in browser.find_element(By.ID, "replay-result").text
    confirm.click()
    wait.until(seen.text_to_be_present_in_element((By.ID, "replay-result"), "replayed"))
    wait.until(seen.text_to_be_present_in_element((By.ID, "audit"), "trying the console"))
    wait.until(seen.text_to_be_present_in_element((By.ID, "event-status"), "processed"))
    audit = browser.find_element(By.ID, "audit").text
    assert "trying the console" in audit
    assert "local:" in audit  # the caller dev's operator function authenticated
    browser.find_element(By.XPATH, "//button[text()='Show the payload']").click()
    wait.until(seen.text_to_be_present_in_element((By.ID, "payload"), stripe_id))
    _screenshot(browser, "event", tmp_path)

    # Health: a delivery dev refused (no signature) is counted for its provider, with why.
    unsigned = post(f"{dev_url}/webhooks/stripe", {"content-type": "application/json"}, b"{}")
    assert unsigned == 401
    wait_until(
        lambda: row(database_url, "SELECT count(*) FROM dev_refused_deliveries") == (1,),
        WAIT_S, "the refusal recorded",
    )  # fmt: skip
    browser.get(f"{console.base}/health")
    counts = browser.find_element(By.CSS_SELECTOR, "tr[data-provider='stripe']").text.split()
    # Two triggered (a replay is no new arrival), none delivered twice, one refused.
    assert counts[:4] == ["stripe", "2", "0", "1"], counts
    assert "stripe" in browser.find_element(By.ID, "reasons").text
    assert browser.find_elements(By.CSS_SELECTOR, "#arrivals-plot canvas")

    # Pause stripe from the health page, see it listed, resume it.
    browser.find_element(By.ID, "pause-provider").send_keys("stripe")
    browser.find_element(By.ID, "pause-reason").send_keys("vendor incident")
    browser.find_element(By.XPATH, "//button[text()='Pause']").click()
    wait.until(seen.text_to_be_present_in_element((By.ID, "pause-result"), "Paused stripe"))
    assert row(database_url, "SELECT count(*) FROM handler_pauses WHERE resumed_at IS NULL") == (1,)
    resume = (By.CSS_SELECTOR, "button[aria-label='Resume stripe *']")
    wait.until(seen.presence_of_element_located(resume))
    # The plot has points to draw once two samples are in.
    wait.until(lambda d: _samples(d.find_element(By.ID, "plot-summary").text) >= 2)
    _screenshot(browser, "health", tmp_path)
    click(resume)
    wait.until(seen.text_to_be_present_in_element((By.ID, "pause-result"), "Resumed stripe"))
    wait.until(seen.presence_of_element_located((By.ID, "no-pauses")))
    assert row(database_url, "SELECT count(*) FROM handler_pauses WHERE resumed_at IS NULL") == (0,)

    # A page on another port of 127.0.0.1 (the same site: the SameSite=Strict cookie goes along)
    # that posts a pause to the console: the gate refuses its Origin, nothing is paused.
    with _other_origin(console.base) as stranger:
        browser.get(stranger)
        wait.until(seen.title_is("answered"))
    assert row(database_url, "SELECT count(*) FROM handler_pauses") == (1,)  # the one above
    # Without the token (a browser that never opened the printed URL): nothing is shown.
    browser.delete_all_cookies()
    browser.get(f"{console.base}/events")
    assert "no token" in browser.find_element(By.TAG_NAME, "body").text
    assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-row]")


def _samples(summary: str) -> int:
    found = re.search(r"samples: (\d+)", summary)
    return int(found[1]) if found else 0


class _StrangerPage(http.server.BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        # A simple (unpreflighted) cross-origin POST with credentials, as a malicious page
        # would send it; the title changes once the console has answered, whatever it said.
        body = f"""<!doctype html><title>stranger</title><script>
fetch("{self.target}/pause", {{method: "POST", mode: "no-cors", credentials: "include",
  body: new URLSearchParams({{provider: "stripe", reason: "hijack"}})}})
  .finally(() => {{ document.title = "answered"; }});
</script>""".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class _other_origin:
    def __init__(self, target: str) -> None:
        handler = type("Page", (_StrangerPage,), {"target": target})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
