"""`webhook-inbox dev`'s console: the functions' own log lines only with --verbose (issue 16)."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest

from tests.e2e.dev_support import DevProcess, post
from tests.support import ROOT
from webhook_inbox.ingest import providers

SAMPLE = ROOT / "events" / "providers.local.json"


def _forged_stripe_delivery() -> tuple[dict[str, str], bytes]:
    """A delivery whose signature does not match: ingest logs a WARNING line for it."""
    stripe = providers.load_config_text(SAMPLE.read_text())["stripe"]
    body = json.dumps(
        {"id": f"evt_{uuid.uuid4().hex[:12]}", "object": "event", "type": "customer.created",
         "created": int(time.time()), "data": {"object": {"id": "cus_forged"}}}
    ).encode()  # fmt: skip
    headers = providers.sign_delivery(stripe, body).headers
    headers["Stripe-Signature"] = headers["Stripe-Signature"][:-4] + "0000"
    return headers, body


def _json_lines_after_a_rejected_delivery(*flags: str) -> list[dict[str, object]]:
    dev = DevProcess(*flags)
    try:
        port = int(dev.wait_for(r"POST http://127\.0\.0\.1:(\d+)/webhooks/")[1])
        dev.wait_for(r"ready; Ctrl-C stops everything")
        headers, body = _forged_stripe_delivery()
        assert post(f"http://127.0.0.1:{port}/webhooks/stripe", headers, body) == 401
        dev.wait_for(r"ingest\s+\| POST /webhooks/stripe -> 401")
        os.killpg(dev.proc.pid, signal.SIGINT)
        assert dev.proc.wait(timeout=30) == 0
        dev.wait_for(r"dev\s+\| stopped", timeout=5)
    finally:
        if dev.proc.poll() is None:
            os.killpg(dev.proc.pid, signal.SIGKILL)
            dev.proc.wait(timeout=10)
    return [json.loads(line) for line in dev.transcript if line.lstrip().startswith("{")]


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_the_functions_json_log_lines_appear_only_with_verbose(verbose: bool) -> None:
    logged = _json_lines_after_a_rejected_delivery(*(["--verbose"] if verbose else []))
    warnings = [line for line in logged if line.get("level") == "WARNING"]
    if verbose:
        # The rejection's own log line (its message the outcome), as it would reach CloudWatch,
        # and nothing secret in it.
        assert [w["message"] for w in warnings] == ["rejected"], logged
        assert "cus_forged" not in json.dumps(logged)
    else:
        assert logged == []
