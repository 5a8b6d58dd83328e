"""Provider secrets from Secrets Manager (moto): cached, refreshed on rotation, rate-limited."""

from __future__ import annotations

import json
from typing import Any

import boto3
import psycopg
import pytest
import stripe

from tests.integration.ingest.conftest import IngestHarness, row_count
from webhook_inbox.ingest import providers


@pytest.fixture
def managed(harness: IngestHarness, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    client = boto3.client("secretsmanager")
    plain = client.create_secret(Name="stripe-hook", SecretString="whsec_managed_v1")["ARN"]
    as_json = client.create_secret(
        Name="shop-hook", SecretString=json.dumps({"webhook_secret": "shop-managed"})
    )["ARN"]
    config = {
        "providers": {
            "stripe": {"scheme": "stripe", "secrets": [{"secret_arn": plain}]},
            "shopify": {
                "scheme": "shopify",
                "secrets": [{"secret_arn": as_json, "json_key": "webhook_secret"}],
            },
        }
    }
    monkeypatch.setenv("PROVIDERS_CONFIG", json.dumps(config))
    providers.reset_for_tests()
    fetches: list[str] = []
    original = providers.MANAGED_SECRETS._fetch

    def counting_fetch(arn: str, json_key: str | None) -> str:
        fetches.append(arn)
        return original(arn, json_key)

    monkeypatch.setattr(providers.MANAGED_SECRETS, "_fetch", counting_fetch)
    return {"client": client, "plain": plain, "fetches": fetches}


def _stripe_delivery(harness: IngestHarness, secret: str, n: int) -> int:
    body = json.dumps({"id": f"evt_{n}", "type": "t"}).encode()
    header = stripe.WebhookSignature.generate_signature_header(
        body.decode(), secret, timestamp=harness.now
    )
    return harness.deliver("stripe", body, {"Stripe-Signature": header}).status


def test_managed_secret_is_cached_and_a_rotation_forces_one_refresh(
    harness: IngestHarness, managed: dict[str, Any], conn: psycopg.Connection[Any]
) -> None:
    fetches = managed["fetches"]
    assert _stripe_delivery(harness, "whsec_managed_v1", 1) == 202
    assert _stripe_delivery(harness, "whsec_managed_v1", 2) == 202
    assert len(fetches) == 1  # cached
    managed["client"].put_secret_value(SecretId=managed["plain"], SecretString="whsec_managed_v2")
    assert _stripe_delivery(harness, "whsec_managed_v2", 3) == 202  # mismatch → one refresh
    assert len(fetches) == 2
    # Bad traffic right after cannot make us call Secrets Manager again (rate limit).
    for n in range(10):
        assert _stripe_delivery(harness, "whsec_attacker", 100 + n) == 401
    assert len(fetches) == 2
    assert row_count(conn) == 3


def test_json_key_secret_verifies(harness: IngestHarness, managed: dict[str, Any]) -> None:
    body = b'{"id":1}'
    headers = providers.sign_delivery(
        providers.registry()["shopify"], body, event_type="orders/create"
    ).headers
    assert harness.deliver("shopify", body, headers).status == 202


def test_unreadable_secret_is_503_not_401(
    harness: IngestHarness, managed: dict[str, Any], conn: psycopg.Connection[Any]
) -> None:
    managed["client"].delete_secret(SecretId=managed["plain"], ForceDeleteWithoutRecovery=True)
    assert _stripe_delivery(harness, "whsec_managed_v1", 1) == 503
    assert row_count(conn) == 0
