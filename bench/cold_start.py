"""Cold start: import and first invocation of each function from a built layer, with and without
the layer's precompiled bytecode, in a read-only, no-bytecode-cache environment; peak RSS.

    python -m bench.cold_start [--runs 5] [--layer DIR]

Lambda mounts the layer (``/opt/python``) and the function (``/var/task``) read-only, so Python
cannot write ``.pyc`` files there: whatever the layer ships uncompiled is compiled again on every
cold start. This script stages the same thing on the host: a layer directory built like
``layers/shared/Makefile`` builds it (``pip install --target`` of ``layers/shared/requirements.txt``
for the host platform, plus ``webhook_inbox`` and the ApplicationLayer's ``webhook_inbox_app``,
which Lambda merges into the same ``/opt/python``), once as is (``uncompiled``) and once after
``python -m compileall --invalidation-mode unchecked-hash`` (``precompiled``), both made read-only.
``sam build`` produces an arm64 layer that cannot run on an x86-64 host; on an arm64 host pass
``--layer .aws-sam/build/SharedLayer`` to measure that build as the precompiled variant.

Each run is a fresh interpreter (``-I -S -B``: isolated, no site-packages, no bytecode writes,
``PYTHONDONTWRITEBYTECODE=1``) whose ``sys.path`` is the function directory then the layer, as
in Lambda. It times ``import app`` and the first ``handler`` call — ingest: a new signed Stripe
delivery (HMAC), a Discord interaction (Ed25519) and a SendGrid batch of two events (ECDSA P-256),
each a claim and its SendMessage; processor: an SQS batch of 10 stored events — against a real
PostgreSQL and a moto server on 127.0.0.1 for SQS. The providers are configured as a deployment
configures them, public keys only: the public-key rows pay for importing ``cryptography`` on their
first delivery, the Stripe row shows what an HMAC delivery costs beside them. Peak RSS is the
child's own high-water mark (``VmHWM`` in ``/proc/self/status``): ``ru_maxrss`` is no use here,
because Linux carries it over ``exec`` from the forked parent (every child reported this
script's own ~100 MB).
Variants alternate run by run; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.common import (
    ROOT,
    bench_database,
    chart_path,
    machine_details,
    machine_line,
    median,
    pyplot,
    table,
    write_section,
)
from bench.stripe_events import stripe_body
from tests.ingest_support import v2_event
from webhook_inbox.ingest import providers, schemes
from webhook_inbox.store import inbox

LAMBDA_MEMORY_MB = 128
TARGET_RATIO = 0.5
FUNCTIONS = ("ingest", "processor")
# Each row: the function it starts and, for ingest, the sample provider whose delivery it handles.
ROWS = {
    "ingest, Stripe (HMAC)": ("ingest", "stripe"),
    "ingest, Discord (Ed25519)": ("ingest", "discord"),
    "ingest, SendGrid (ECDSA)": ("ingest", "sendgrid"),
    "processor": ("processor", None),
}
HMAC_INGEST = "ingest, Stripe (HMAC)"
PUBLIC_KEY_SCHEMES = {"discord": schemes.Discord, "sendgrid": schemes.SendGrid}

# Runs in the child: time the import and the first invocation, report through a file.
RUNNER = r"""
import sys, time
started = time.perf_counter()
task, layer, event_path, result_path = sys.argv[1:5]
sys.path[:0] = [task, layer]
import json
import app
imported = time.perf_counter()

class Context:
    function_name = "cold-start-bench"
    function_version = "$LATEST"
    memory_limit_in_mb = 128
    aws_request_id = "cold-start"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:cold-start-bench"
    log_group_name = "/aws/lambda/cold-start-bench"
    log_stream_name = "bench"
    def get_remaining_time_in_millis(self):
        return 60000

with open(event_path) as f:
    event = json.load(f)
invoke_started = time.perf_counter()
reply = app.handler(event, Context())
finished = time.perf_counter()
with open("/proc/self/status") as f:
    peak_kb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
with open(result_path, "w") as f:
    json.dump({"import_ms": (imported - started) * 1000,
               "invoke_ms": (finished - invoke_started) * 1000,
               "peak_kb": peak_kb,
               "cryptography": "cryptography" in sys.modules,
               "reply": reply}, f)
"""


def base_python() -> str:
    """The interpreter without this virtualenv's site-packages (the layer brings its own)."""
    candidate = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return str(candidate if candidate.exists() else Path(sys.base_prefix) / "bin" / "python3")


def build_layer(into: Path) -> Path:
    """A layer like layers/shared/Makefile's, for the host platform, without bytecode."""
    site = into / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-compile",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--target",
            str(site),
            "-r",
            str(ROOT / "layers" / "shared" / "requirements.txt"),
        ],
        check=True,
        capture_output=True,
    )
    for package in (ROOT / "layers" / "shared" / "webhook_inbox",
                    ROOT / "application" / "webhook_inbox_app"):  # fmt: skip
        # The processor also has the ApplicationLayer: Lambda merges both into /opt/python.
        shutil.copytree(package, site / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    strip_bytecode(site)
    return site


def strip_bytecode(site: Path) -> None:
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache)


def compile_layer(site: Path) -> None:
    subprocess.run(
        [
            base_python(),
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            str(site),
        ],
        check=True,
    )


def make_read_only(path: Path) -> None:
    for item in [path, *path.rglob("*")]:
        mode = item.stat().st_mode
        item.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def make_writable(path: Path) -> None:
    for item in [path, *path.rglob("*")]:
        item.chmod(item.stat().st_mode | stat.S_IWUSR)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Sample:
    import_ms: float
    invoke_ms: float
    rss_mb: float
    wall_ms: float
    cryptography: bool  # whether the child had imported it by the end

    @property
    def total_ms(self) -> float:
        return self.import_ms + self.invoke_ms


@dataclass
class Series:
    row: str
    variant: str
    samples: list[Sample] = field(default_factory=list)

    def med(self, attr: str) -> float:
        return median([getattr(s, attr) for s in self.samples])


class Stage:
    """Staged layer variants, function directories, a moto SQS endpoint and event files."""

    def __init__(self, work: Path, url: str, layer: Path | None) -> None:
        self.work = work
        self.url = url
        uncompiled = build_layer(work / "uncompiled")
        if layer is None:
            shutil.copytree(uncompiled, work / "precompiled" / "python")
            precompiled = work / "precompiled" / "python"
            compile_layer(precompiled)
        else:
            precompiled = layer / "python"
        self.layers = {"uncompiled": uncompiled, "precompiled": precompiled}
        self.tasks: dict[str, Path] = {}
        for function in FUNCTIONS:
            task = work / "task" / function
            task.mkdir(parents=True)
            shutil.copy(ROOT / "functions" / function / "app.py", task / "app.py")
            self.tasks[function] = task
        self.sample = providers.load_config_text(
            (ROOT / "events" / "providers.local.json").read_text()
        )
        config = work / "providers.json"
        config.write_text(json.dumps(deployed_config()))
        for path in (work / "uncompiled", work / "task", config):
            make_read_only(path)
        if layer is None:
            make_read_only(work / "precompiled")

        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        import boto3

        sqs = boto3.client("sqs", endpoint_url=self.endpoint, region_name="us-east-1")
        self.queue_url = sqs.create_queue(QueueName="cold-start")["QueueUrl"]
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "DATABASE_URL": url,
            "PROVIDERS_CONFIG_FILE": str(config),
            "PROCESSING_QUEUE_URL": self.queue_url,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "POWERTOOLS_SERVICE_NAME": "webhook-inbox",
            "POWERTOOLS_METRICS_NAMESPACE": "WebhookInboxBench",
            "AWS_LAMBDA_FUNCTION_NAME": "cold-start-bench",
        }

    def close(self) -> None:
        self.moto.stop()

    def event_for(self, row: str) -> Path:
        function, provider = ROWS[row]
        path = self.work / "events" / f"{function}-{uuid.uuid4().hex}.json"
        path.parent.mkdir(exist_ok=True)
        if provider:
            now = int(time.time())
            body = delivery_body(provider, now)
            # Signed with the sample's private key; the deployed config holds its public half.
            signed = providers.sign_delivery(self.sample[provider], body, timestamp=now)
            event = v2_event(provider, body, signed.headers)
        else:
            event = {"Records": [sqs_record(row_id) for row_id in self.stored_events(10)]}
        path.write_text(json.dumps(event))
        return path

    def stored_events(self, count: int) -> list[int]:
        with psycopg.connect(self.url) as conn:
            return [
                inbox.claim_event(
                    conn,
                    provider="stripe",
                    event_id=f"evt_{uuid.uuid4().hex}",
                    event_type="customer.created",
                    body_sha256=uuid.uuid4().bytes * 2,
                    payload={"data": {"object": {"id": f"cus_{uuid.uuid4().hex}"}}},
                ).id
                for _ in range(count)
            ]

    def run(self, row: str, variant: str) -> Sample:
        function = ROWS[row][0]
        event = self.event_for(row)
        result = self.work / "events" / f"result-{uuid.uuid4().hex}.json"
        started = time.perf_counter()
        child = subprocess.Popen(
            [
                base_python(),
                "-I",
                "-S",
                "-B",
                "-c",
                RUNNER,
                str(self.tasks[function]),
                str(self.layers[variant]),
                str(event),
                str(result),
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        stderr = child.stderr.read() if child.stderr else b""
        _, status, _ = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall_ms = (time.perf_counter() - started) * 1000
        if child.returncode != 0 or not result.exists():
            raise RuntimeError(f"{function}/{variant} failed: {stderr.decode()[-2000:]}")
        found: dict[str, Any] = json.loads(result.read_text())
        check_reply(row, found["reply"])
        return Sample(
            found["import_ms"],
            found["invoke_ms"],
            found["peak_kb"] / 1024,
            wall_ms,
            found["cryptography"],
        )


def sqs_record(row_id: int) -> dict[str, Any]:
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": f"cold-{row_id}",
        "body": json.dumps({"id": row_id}),
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:cold-start",
        "awsRegion": "us-east-1",
    }


def deployed_config() -> dict[str, Any]:
    """The sample providers as a deployment holds them: the public-key providers with their
    public keys only (the sample's private keys sign the deliveries)."""
    config: dict[str, Any] = json.loads((ROOT / "events" / "providers.local.json").read_text())
    for spec in config["providers"].values():
        scheme = PUBLIC_KEY_SCHEMES.get(spec["scheme"])
        if scheme is not None:
            spec["secrets"] = [{"value": scheme.public_key(s["value"])} for s in spec["secrets"]]
        elif spec["scheme"] == "standard-webhooks":  # v1a keys, or HMAC secrets as they are
            spec["secrets"] = [
                {"value": schemes.StandardWebhooks.public_key(s["value"])}
                if s["value"].startswith("whsk_")
                else s
                for s in spec["secrets"]
            ]
    return config


def delivery_body(provider: str, now: int) -> bytes:
    if provider == "discord":  # a slash command, stored and answered with a deferral
        command = {"name": "hello", "type": 1}
        interaction = {
            "type": 2,
            "id": str(uuid.uuid4().int % 10**19),
            "token": "t",
            "data": command,
        }
        return json.dumps(interaction).encode()
    if provider == "sendgrid":
        events = [
            {
                "event": e,
                "email": "a@example.com",
                "sg_event_id": uuid.uuid4().hex,
                "timestamp": now,
            }
            for e in ("processed", "delivered")
        ]
        return json.dumps(events).encode() + b"\r\n"
    return stripe_body(f"evt_{uuid.uuid4().hex}", now)


# What each row's first invocation must answer (a stored event, or its sender's acknowledgement).
EXPECTED_STATUS = {"ingest, Discord (Ed25519)": 200}


def check_reply(row: str, reply: dict[str, Any]) -> None:
    function = ROWS[row][0]
    expected = EXPECTED_STATUS.get(row, 202)
    if function == "ingest" and reply.get("statusCode") != expected:
        raise RuntimeError(f"{row}: the first invocation answered {reply}")
    if function == "processor" and reply.get("batchItemFailures"):
        raise RuntimeError(f"processor's first invocation failed records: {reply}")


def measure(url: str, *, runs: int, layer: Path | None) -> list[Series]:
    work = Path(tempfile.mkdtemp(prefix="wi-cold-start-"))
    series = {(r, v): Series(r, v) for r in ROWS for v in ("uncompiled", "precompiled")}
    try:
        stage = Stage(work, url, layer)
        try:
            for run_no in range(runs + 1):
                for row in ROWS:
                    order = ["uncompiled", "precompiled"]
                    if run_no % 2:
                        order.reverse()
                    for variant in order:
                        sample = stage.run(row, variant)
                        if run_no:  # the first round warms the OS page cache; not counted
                            series[(row, variant)].samples.append(sample)
        finally:
            stage.close()
    finally:
        make_writable(work)
        shutil.rmtree(work, ignore_errors=True)
    return list(series.values())


def report(series: list[Series], command: str, url: str, runs: int, layer: Path | None) -> str:
    rows = []
    for s in series:
        other = pick(series, s.row, "uncompiled")
        hmac = pick(series, HMAC_INGEST, s.variant)
        rows.append(
            [
                f"{s.row}, {s.variant}",
                f"{s.med('import_ms'):.0f}",
                f"{s.med('invoke_ms'):.0f}",
                f"{s.med('total_ms'):.0f}",
                f"{s.med('total_ms') / other.med('total_ms'):.2f}x",
                f"{s.med('total_ms') / hmac.med('total_ms'):.2f}x"
                if s.row.startswith("ingest")
                else "",
                f"{s.med('wall_ms'):.0f}",
                f"{s.med('rss_mb'):.1f}",
                "yes" if any(sample.cryptography for sample in s.samples) else "no",
            ]
        )
    source = (
        f"the layer in `{layer}` (precompiled) and the same packages uncompiled"
        if layer
        else "a host-platform layer staged like `layers/shared/Makefile` builds it"
    )
    return "\n".join(
        [
            "## Cold start: layer bytecode and peak memory",
            "",
            f"`{command}` — {machine_line(machine_details(url))}.",
            "",
            f"Fresh read-only interpreter per run (`-I -S -B`, `PYTHONDONTWRITEBYTECODE=1`) on"
            f" {source}; median of {runs} runs per row, variants alternating. *import* is"
            " `import app`, *first call* the first `handler` invocation (ingest: a new signed"
            " delivery, Stripe's HMAC or a public-key sender's, whose first call imports"
            " `cryptography`; processor: a batch of 10), *process* the whole child from exec to"
            " exit. *vs HMAC ingest* compares import + first call with the Stripe row of the same"
            " layer. The providers are configured as deployed: public keys only."
            f" Targets: precompiled ≤ {TARGET_RATIO}x uncompiled; ingest's peak RSS within a"
            f" {LAMBDA_MEMORY_MB} MB Lambda.",
            "",
            table(
                [
                    "function, layer",
                    "import ms",
                    "first call ms",
                    "import + first call ms",
                    "vs uncompiled",
                    "vs HMAC ingest",
                    "process ms",
                    "peak RSS MB",
                    "cryptography loaded",
                ],
                rows,
            ),
            "",
            "Peak RSS is the child's own high-water mark (`VmHWM`; `ru_maxrss` of a child is"
            " inherited across `exec` from the forking parent on Linux, so it reported this"
            " script's size instead). Lambda's 128 MB also holds the runtime client, which this"
            " bench does not load.",
            "",
            "![cold start](benchmarks/cold_start.png)",
        ]
    )


def pick(series: list[Series], row: str, variant: str) -> Series:
    return next(s for s in series if s.row == row and s.variant == variant)


def chart(series: list[Series]) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), dpi=110)
    width = 0.35
    labels = [row.replace(", ", "\n") for row in ROWS]
    for offset, variant in enumerate(("uncompiled", "precompiled")):
        chosen = [pick(series, row, variant) for row in ROWS]
        xs = [i + (offset - 0.5) * width for i in range(len(ROWS))]
        left.bar(xs, [s.med("import_ms") for s in chosen], width, label=f"{variant}: import")
        left.bar(
            xs,
            [s.med("invoke_ms") for s in chosen],
            width,
            bottom=[s.med("import_ms") for s in chosen],
            label=f"{variant}: first call",
            alpha=0.55,
        )
        right.bar(xs, [s.med("rss_mb") for s in chosen], width, label=variant)
    for ax in (left, right):
        ax.set_xticks(range(len(ROWS)), labels, fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    left.set_ylabel("milliseconds")
    left.set_title("Import + first invocation (read-only, no .pyc writes)")
    left.legend(fontsize=7)
    right.axhline(LAMBDA_MEMORY_MB, color="red", linestyle="--", label="128 MB Lambda")
    right.set_ylabel("peak RSS (MB)")
    right.set_title("Peak resident memory")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(chart_path("cold_start"))
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--layer", type=Path, default=None, help="a built layer (has python/)")
    args = parser.parse_args()
    command = f"python -m bench.cold_start --runs {args.runs}" + (
        f" --layer {args.layer}" if args.layer else ""
    )
    with bench_database() as url:
        series = measure(url, runs=args.runs, layer=args.layer)
        text = report(series, command, url, args.runs, args.layer)
    chart(series)
    write_section("cold_start", text)
    print(text)


if __name__ == "__main__":
    main()
