"""How long the console's pages take with 100,000 events in the database, over `webhook-inbox dev`.

    python -m bench.console_load [--events 100000] [--runs 15] [--write]

Starts `webhook-inbox dev` in a temporary folder, seeds ``--events`` rows straight into its
database (one INSERT … SELECT: four providers, every status, delivery ids on a quarter, received
over the last 30 days), then starts `webhook-inbox console --no-browser` there as a user would
and measures, per page:

- *server*: the page's HTTP answer through the console (which calls dev's operator function,
  which queries PostgreSQL), median and p95 of ``--runs`` GETs with the console's cookie;
- *browser*: a headless Chromium's load of the page (navigation start to the load event,
  scripts and styles included), median of ``--runs``, when chromium and chromedriver are there;
- *baseline*: the same operator request through dev's operator function without the console
  (what `webhook-inbox events list` waits for), so the console's own share reads as a ratio.

Loopback numbers on a shared machine; a deployed stack adds TLS, SigV4 and Lambda's invoke path
to every operator call (one or two per page).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, machine_details, machine_line

RESULTS = ROOT / "bench" / "results" / "console_load.md"
CLI = Path(sys.executable).parent / "webhook-inbox"

SEED = """
INSERT INTO webhook_events (provider, event_id, delivery_id, event_type, status, attempts,
                            body_sha256, payload, received_at, last_delivery_at, updated_at,
                            processed_at, lease_owner, lease_expires_at, error_kind, last_error)
SELECT p.provider, 'evt_load_' || g, CASE WHEN g %% 4 = 0 THEN 'dlv-load-' || g END,
       (ARRAY['customer.created', 'invoice.paid', 'push', 'order.created'])[1 + g %% 4],
       s.status, CASE WHEN s.status IN ('received') THEN 0 ELSE 1 + g %% 3 END,
       sha256(g::text::bytea), jsonb_build_object('id', 'evt_load_' || g, 'n', g),
       t.at, t.at, t.at,
       CASE WHEN s.status IN ('processed', 'ignored') THEN t.at END,
       CASE WHEN s.status = 'processing' THEN 'bench' END,
       CASE WHEN s.status = 'processing' THEN now() + interval '1 hour' END,
       CASE WHEN s.status IN ('failed', 'dead_letter') THEN 'handler_error' END,
       CASE WHEN s.status IN ('failed', 'dead_letter') THEN 'RuntimeError: downstream 503' END
  FROM generate_series(1, %(count)s) AS g
 CROSS JOIN LATERAL (SELECT (ARRAY['stripe', 'github', 'shopify', 'example'])[1 + g %% 4]
                            AS provider) AS p
 CROSS JOIN LATERAL (SELECT CASE WHEN g %% 100 < 90 THEN 'processed'
                                 WHEN g %% 100 < 94 THEN 'ignored'
                                 WHEN g %% 100 < 97 THEN 'failed'
                                 WHEN g %% 100 < 99 THEN 'dead_letter'
                                 WHEN g %% 1000 < 995 THEN 'received'
                                 ELSE 'processing' END AS status) AS s
 CROSS JOIN LATERAL (SELECT now() - (%(count)s - g) * interval '30 days' / %(count)s AS at) AS t
"""


def _start(argv: list[str], folder: Path, ready: str) -> tuple[subprocess.Popen[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DATABASE_"))}
    proc = subprocess.Popen(
        [str(CLI), *argv], cwd=folder, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        if re.search(ready, line):
            break
    else:
        raise RuntimeError(f"{argv[0]} did not start:\n{''.join(lines)}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    return proc, lines


def _seed(database_url: str, count: int) -> dict[str, str]:
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(SEED, {"count": count})
        conn.execute("ANALYZE webhook_events")
        dead = conn.execute(
            "SELECT provider, event_id FROM webhook_events WHERE status = 'dead_letter' "
            "ORDER BY id LIMIT 1"
        ).fetchone()
        delivery = conn.execute(
            "SELECT provider, delivery_id FROM webhook_events WHERE delivery_id IS NOT NULL "
            "ORDER BY id LIMIT 1"
        ).fetchone()
    assert dead is not None
    assert delivery is not None
    return {
        "dead": f"{dead[0]}/{dead[1]}",
        "delivery_provider": delivery[0],
        "delivery_id": delivery[1],
    }


class _Client:
    def __init__(self, base: str, token: str) -> None:
        self.port = int(base.rsplit(":", 1)[1])
        self.host = f"127.0.0.1:{self.port}"
        status, headers = self._get(f"/events?token={token}", {})
        assert status == 303, status
        self.cookie = headers["Set-Cookie"].split(";")[0]

    def _get(self, path: str, extra: dict[str, str]) -> tuple[int, dict[str, str]]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request("GET", path, headers={"Host": self.host, **extra})
            reply = connection.getresponse()
            reply.read()
            return reply.status, dict(reply.getheaders())
        finally:
            connection.close()

    def timed(self, path: str) -> float:
        began = time.perf_counter()
        status, _ = self._get(path, {"Cookie": self.cookie})
        elapsed = (time.perf_counter() - began) * 1000
        assert status in {200, 303}, (path, status)
        return elapsed


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
    }


def _browser_ms(url: str, pages: dict[str, str], runs: int) -> dict[str, float] | None:
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="webhook-inbox-bench-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        driver.get(url)  # the token for the cookie
        base = url.split("/events", maxsplit=1)[0]
        found: dict[str, float] = {}
        for name, path in pages.items():
            samples = []
            for _ in range(runs):
                driver.get(base + path)
                samples.append(
                    float(
                        driver.execute_script(
                            "const n = performance.getEntriesByType('navigation')[0];"
                            "return n.loadEventEnd - n.startTime;"
                        )
                    )
                )
            found[name] = statistics.median(samples)
        return found
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def measure(count: int, runs: int) -> dict[str, Any]:
    from webhook_inbox_tools.cli import operator_remote
    from webhook_inbox_tools.dev.env_file import running_dev_environment

    folder = Path(tempfile.mkdtemp(prefix="webhook-inbox-bench-console-"))
    dev, lines = _start(["dev", "--port", "0", "--sweep-every", "60"], folder, "ready; Ctrl-C")
    console = None
    try:
        database_url = next(m[1] for line in lines if (m := re.search(r"DATABASE_URL=(\S+)", line)))
        began = time.perf_counter()
        ids = _seed(database_url, count)
        seed_s = time.perf_counter() - began
        console, said = _start(["console", "--no-browser"], folder, r"open http")
        url = next(m[1] for line in said if (m := re.search(r"open (\S+)", line)))
        client = _Client(url.split("/events")[0], url.split("token=")[1])
        pages = {
            "events, newest 50": "/events",
            "events, status=dead_letter": "/events?status=dead_letter",
            "events, provider=github&type=push": "/events?provider=github&type=push",
            "search by delivery id, every provider": f"/events?q={ids['delivery_id']}",
            "search by delivery id, one provider": (
                f"/events?q={ids['delivery_id']}&provider={ids['delivery_provider']}"
            ),
            "event page": f"/events/{ids['dead']}",
            "health": "/health",
        }
        server = {}
        for name, path in pages.items():
            client.timed(path)  # warm the operator function's connection for this level
            server[name] = _summary([client.timed(path) for _ in range(runs)])
        remote = operator_remote.RemoteBackend(
            operator_remote.dev_target(running_dev_environment(folder / ".webhook-inbox-dev.env"))
        )
        baseline_body = {"command": "events list", "limit": 50}
        remote.call(baseline_body)
        baseline = []
        for _ in range(runs):
            began = time.perf_counter()
            remote.call(baseline_body)
            baseline.append((time.perf_counter() - began) * 1000)
        browser = _browser_ms(url, {k: pages[k] for k in ("events, newest 50", "event page",
                                                          "health")}, runs)  # fmt: skip
        return {
            "count": count,
            "seed_s": seed_s,
            "server": server,
            "baseline": statistics.median(baseline),
            "browser": browser,
            "machine": machine_details(database_url),
        }
    finally:
        if console is not None:
            console.terminate()
            console.wait(timeout=10)
        os.killpg(dev.pid, signal.SIGINT)
        dev.wait(timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def render(result: dict[str, Any], runs: int) -> str:
    lines = [
        f"# The console's pages with {result['count']:,} events (`webhook-inbox dev`)",
        "",
        f"`python -m bench.console_load --events {result['count']} --runs {runs}`: "
        f"{machine_line(result['machine'])}; seeded in {result['seed_s']:.1f} s.",
        "",
        "*server*: the console's HTTP answer (it calls dev's operator function, which queries "
        "PostgreSQL), median and p95 of the runs; *browser*: headless Chromium from navigation "
        "to the load event (htmx, styles and, on health, uPlot included), median. A search that "
        "finds one event answers with a redirect to it: its figure is the search, not the event "
        "page. Health reads the traffic of the last 24 h (the whole table here: no index leads "
        "with those times); its live refresh every 3 s reads only the status. Milliseconds.",
        "",
        "| page | server median | server p95 | browser median |",
        "|---|---:|---:|---:|",
    ]
    browser = result["browser"] or {}
    for name, row in result["server"].items():
        shown = f"{browser[name]:.0f}" if name in browser else "-"
        lines.append(f"| {name} | {row['median']:.1f} | {row['p95']:.1f} | {shown} |")
    first = result["server"]["events, newest 50"]["median"]
    lines += [
        "",
        f"Baseline: `events list` (50 rows) through dev's operator function without the console: "
        f"{result['baseline']:.1f} ms median; the console's events page is "
        f"{first / result['baseline']:.1f}x that (rendering the page, and its own loopback hop).",
        "",
    ]
    if result["browser"] is None:
        lines.append("No chromium/chromedriver on this machine: no browser figures.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000, help="rows to seed")
    parser.add_argument("--runs", type=int, default=15, help="loads per page")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    text = render(measure(args.events, args.runs), args.runs)
    print(text)
    if args.write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
