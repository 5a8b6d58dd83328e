"""How long an operator command takes through the operator function, in `webhook-inbox dev`.

    python -m bench.operator_latency [--warm 20] [--write]

Starts `webhook-inbox dev` (its own PostgreSQL, moto, the functions, the operator function on
its gateway) in a temporary folder and seeds 200 events. Then, as `webhook-inbox … ` does from
that folder, it signs and POSTs commands to dev's operator URLs (``operator_remote``):

- cold: the first call of each level after dev started (the execution environment's first
  request: its database connection, for act also its SQS client);
- warm: the next ``--warm`` calls (median, p95, max);
- baseline: the same commands run in this process on the database directly (the CLI with
  ``--database-url``), so the function's cost reads as a difference and a ratio.

Also the whole CLI (a fresh `webhook-inbox status` process from dev's folder, which goes through
the function, against the same with DATABASE_URL set), and the operator function's import in a
fresh interpreter, which is what Lambda's init adds to a deployed cold start. Loopback numbers:
a deployed call adds TLS, SigV4 checking and Lambda's invoke path (tens of ms warm).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ROOT, machine_details, machine_line

RESULTS = ROOT / "bench" / "results" / "operator_latency.md"
CLI = Path(sys.executable).parent / "webhook-inbox"


def _start_dev(folder: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DATABASE_"))}
    proc = subprocess.Popen(
        [str(CLI), "dev", "--port", "0", "--sweep-every", "60"],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    found: dict[str, str] = {}
    began = time.monotonic()
    for line in proc.stdout:
        if match := re.search(r"DATABASE_URL=(\S+)", line):
            found["database_url"] = match[1]
        if "ready; Ctrl-C stops everything" in line:
            found["ready_s"] = f"{time.monotonic() - began:.1f}"
            break
    else:
        raise RuntimeError("dev did not start")
    return proc, found


def _seed(database_url: str, count: int) -> None:
    import hashlib

    import psycopg

    from webhook_inbox.store import inbox

    with psycopg.connect(database_url, autocommit=True) as conn:
        for i in range(count):
            body = json.dumps({"id": f"evt_bench_{i}", "type": "customer.created"}).encode()
            claimed = inbox.claim_event(
                conn,
                provider="stripe",
                event_id=f"evt_bench_{i}",
                event_type="customer.created",
                body_sha256=hashlib.sha256(body).digest(),
                payload=json.loads(body),
            )
            conn.execute(
                "UPDATE webhook_events SET status = 'dead_letter', attempts = 8 WHERE id = %s",
                (claimed.id,),
            )


def _timed(call: Callable[[], Any]) -> float:
    began = time.perf_counter()
    call()
    return (time.perf_counter() - began) * 1000


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max": ordered[-1],
    }


COMMANDS: dict[str, dict[str, Any]] = {
    "status (read)": {"command": "status"},
    "events list, 50 rows (read)": {"command": "events list", "limit": 50},
    "events show --payload (act)": {
        "command": "events show", "provider": "stripe", "id": "evt_bench_7", "payload": True,
    },
    "replay 1 event, sent to SQS (act)": {
        "command": "replay", "provider": "stripe", "ids": ["evt_bench_3"], "reason": "bench",
    },
}  # fmt: skip


def measure(warm: int) -> dict[str, Any]:
    from webhook_inbox_tools.cli import operator_backend, operator_remote
    from webhook_inbox_tools.dev.env_file import running_dev_environment

    folder = Path(tempfile.mkdtemp(prefix="webhook-inbox-bench-operator-"))
    proc, found = _start_dev(folder)
    try:
        _seed(found["database_url"], 200)
        dev_env = running_dev_environment(folder / ".webhook-inbox-dev.env")
        remote = operator_remote.RemoteBackend(operator_remote.dev_target(dev_env))
        rows: dict[str, dict[str, Any]] = {}
        for name, body in COMMANDS.items():  # the first of each level is its cold call
            cold = _timed(lambda body=body: remote.call(body))
            samples = [_timed(lambda body=body: remote.call(body)) for _ in range(warm)]
            rows[name] = {"cold": cold, **_summary(samples)}
        args = argparse.Namespace(database_url=found["database_url"], operator="bench")
        local = operator_backend.LocalBackend(args)
        for name, body in COMMANDS.items():
            local.call(body)  # its connection opened
            samples = [_timed(lambda body=body: local.call(body)) for _ in range(warm)]
            rows[name]["direct"] = statistics.median(samples)
        local.close()
        cli = _cli_runs(folder, found["database_url"])
        return {
            "rows": rows,
            "cli": cli,
            "import_ms": _import_ms(),
            "dev_ready_s": found["ready_s"],
            "machine": machine_details(found["database_url"]),
        }
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def _cli_runs(folder: Path, database_url: str, runs: int = 5) -> dict[str, float]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DATABASE_"))}

    def once(env: dict[str, str]) -> float:
        return _timed(
            lambda: subprocess.run(
                [str(CLI), "status"], cwd=folder, env=env, check=True, capture_output=True
            )
        )

    return {
        "through dev's operator function": statistics.median(once(base) for _ in range(runs)),
        "with DATABASE_URL (direct)": statistics.median(
            once({**base, "DATABASE_URL": database_url}) for _ in range(runs)
        ),
    }


def _import_ms() -> float:
    probe = (
        "import sys, time\n"
        f"sys.path[:0] = [{str(ROOT / 'functions' / 'operator')!r}, "
        f"{str(ROOT / 'layers' / 'shared')!r}]\n"
        "began = time.perf_counter()\n"
        "import app\n"
        "print((time.perf_counter() - began) * 1000)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def render(result: dict[str, Any], warm: int) -> str:
    lines = [
        "# Operator commands through the operator function (`webhook-inbox dev`)",
        "",
        f"`python -m bench.operator_latency --warm {warm}`: "
        f"{machine_line(result['machine'])} · dev ready in {result['dev_ready_s']} s.",
        "",
        "A signed POST to dev's operator URL as the CLI sends it, answered by the real function "
        "(its own process, as one Lambda execution environment); *first call* is the command's "
        "first after dev started, which for `status` and `events show --payload` is also the "
        "first request of the read and the act environment (their database connection opens; "
        "the first replay builds the SQS client); *direct* is the same command run in-process "
        "on the database (the CLI with `--database-url`), median of as many calls. Milliseconds.",
        "",
        "| command | first call | warm median | warm p95 | warm max | direct median "
        "| warm / direct |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["rows"].items():
        ratio = row["median"] / row["direct"] if row["direct"] else float("nan")
        lines.append(
            f"| {name} | {row['cold']:.1f} | {row['median']:.1f} | {row['p95']:.1f} "
            f"| {row['max']:.1f} | {row['direct']:.1f} | {ratio:.1f}x |"
        )
    lines += [
        "",
        "The whole command, a fresh `webhook-inbox status` process (median of 5), ms:",
        "",
        "| how | ms |",
        "|---|---:|",
    ]
    lines += [f"| {how} | {ms:.0f} |" for how, ms in result["cli"].items()]
    lines += [
        "",
        f"Importing functions/operator/app.py in a fresh interpreter (Lambda's init, without "
        f"bytecode precompiled as the layer ships it): {result['import_ms']:.0f} ms.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warm", type=int, default=20, help="warm calls per command")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    text = render(measure(args.warm), args.warm)
    print(text)
    if args.write:
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
