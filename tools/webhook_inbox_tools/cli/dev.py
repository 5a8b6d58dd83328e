"""`webhook-inbox dev`: run the whole pipeline locally until Ctrl-C."""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from types import FrameType

from webhook_inbox import providers
from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.cli.params import positive_int
from webhook_inbox_tools.cli.signing import curl_command, load_registry
from webhook_inbox_tools.dev.lambda_runtime import default_functions_dir, sample_providers_file
from webhook_inbox_tools.dev.stack import DevOptions, DevStack
from webhook_inbox_tools.dev.workers import say


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (loopback)")
    parser.add_argument(
        "--port", type=int, default=3000, help="HTTP port for POST /webhooks/{provider} (0: any)"
    )
    parser.add_argument(
        "--providers",
        metavar="FILE",
        help="provider configuration (default: $PROVIDERS_CONFIG_FILE, else the sample "
        "events/providers.local.json)",
    )
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="use this PostgreSQL (default: $DATABASE_URL, else a throwaway embedded one)",
    )
    parser.add_argument(
        "--sweep-every", type=float, default=10.0, metavar="SECONDS", help="sweeper period"
    )
    parser.add_argument(
        "--visibility-timeout", type=positive_int, default=30, metavar="SECONDS",
        help="processing queue visibility timeout (a failed batch item comes back after it)",
    )  # fmt: skip
    parser.add_argument(
        "--max-receive-count", type=positive_int, default=5,
        help="receives before SQS moves a message to the DLQ",
    )  # fmt: skip
    parser.add_argument("--functions-dir", type=Path, help="where functions/<name>/app.py live")
    parser.add_argument("--verbose", action="store_true", help="the functions' own logs too")


def _providers_file(args: argparse.Namespace) -> Path | None:
    if args.providers:
        return Path(args.providers).resolve()
    if os.environ.get("PROVIDERS_CONFIG_FILE") or os.environ.get("PROVIDERS_CONFIG"):
        return None  # the functions read the environment themselves
    return sample_providers_file()


def sample_delivery(registry: providers.Registry, base_url: str) -> str | None:
    """A signed curl for one sample event the example handlers process (stripe when present)."""
    name = "stripe" if registry.get("stripe") else next(iter(sorted(registry.providers)), None)
    if name is None:
        return None
    now = int(time.time())
    event_id = f"evt_dev_{uuid.uuid4().hex[:12]}"
    body = json.dumps(
        {
            "id": event_id,
            "object": "event",
            "type": "customer.created",
            "created": now,
            "data": {"object": {"id": f"cus_{uuid.uuid4().hex[:10]}", "object": "customer"}},
        },
        separators=(",", ":"),
    ).encode()
    headers = providers.sign_delivery(
        registry[name], body, event_id=event_id, timestamp=now, event_type="customer.created"
    )
    return curl_command(f"{base_url}/webhooks/{name}", headers, body, None)


def cmd_dev(args: argparse.Namespace) -> int:
    providers_file = _providers_file(args)
    if providers_file is None and not (
        os.environ.get("PROVIDERS_CONFIG_FILE") or os.environ.get("PROVIDERS_CONFIG")
    ):
        raise ConfigurationError("no provider configuration: pass --providers FILE")
    registry = load_registry(str(providers_file) if providers_file else None)
    options = DevOptions(
        functions_dir=(args.functions_dir or default_functions_dir()).resolve(),
        providers_file=providers_file,
        database_url=args.database_url or os.environ.get("DATABASE_URL"),
        host=args.host,
        port=args.port,
        sweep_every_s=args.sweep_every,
        visibility_timeout_s=args.visibility_timeout,
        max_receive_count=args.max_receive_count,
        verbose=args.verbose,
    )
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    stack = DevStack(options)
    try:
        stack.start()
        base = f"http://{options.host}:{stack.port}"
        names = ", ".join(sorted(registry.providers))
        say("dev", f"POST {base}/webhooks/{{provider}}  providers: {names}")
        say("dev", f"processing queue {stack.queue_url} (moto at {stack.endpoint})")
        say("dev", f"DATABASE_URL={stack.database_url}")
        curl = sample_delivery(registry, base)
        if curl:
            say("dev", "a signed sample delivery (valid for 5 minutes):")
            print(curl, flush=True)
        say("dev", "ready; Ctrl-C stops everything")
        while not stop.wait(0.5):
            if not stack.children_alive():
                say("dev", "a function process exited unexpectedly; stopping")
                return 1
        return 0
    finally:
        say("dev", "stopping")
        stack.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        say("dev", "stopped")
