"""A realistic Stripe event body, with nothing but the standard library: ``bench.cost`` imports it
in a child that runs another tree's code, whose modules may be laid out differently."""

from __future__ import annotations

import json
import uuid


def stripe_body(event_id: str, created: int) -> bytes:
    """A Stripe ``customer.created`` event of realistic size (~1 KB)."""
    customer = f"cus_{uuid.uuid4().hex[:14]}"
    body = {
        "id": event_id,
        "object": "event",
        "api_version": "2024-06-20",
        "created": created,
        "type": "customer.created",
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": f"req_{uuid.uuid4().hex[:14]}", "idempotency_key": str(uuid.uuid4())},
        "data": {
            "object": {
                "id": customer,
                "object": "customer",
                "address": {"city": "Berlin", "country": "DE", "line1": "Example 1"},
                "balance": 0,
                "created": created,
                "currency": "eur",
                "description": "benchmark customer",
                "email": f"{customer}@example.com",
                "invoice_prefix": uuid.uuid4().hex[:8].upper(),
                "invoice_settings": {"default_payment_method": None, "footer": None},
                "livemode": False,
                "metadata": {"plan": "pro", "source": "bench"},
                "name": "Benchmark Customer",
                "preferred_locales": ["de", "en"],
                "shipping": None,
                "tax_exempt": "none",
            }
        },
    }
    return json.dumps(body, separators=(",", ":")).encode()
