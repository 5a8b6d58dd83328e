"""What the circuit breaker counts from a chunk's outcomes, per handler key."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from webhook_inbox.processing import circuits, handlers
from webhook_inbox.processing.passes import EventResult
from webhook_inbox.store.inbox import LeasedEvent
from webhook_inbox.store.pauses import KeyOutcome


@pytest.fixture(autouse=True)
def routed() -> Iterator[None]:
    saved = dict(handlers.HANDLERS)
    handlers.clear()
    handlers.install({("stripe", "invoice.*"): lambda c, e: None, ("acme", "a"): lambda c, e: None})
    yield
    handlers.clear()
    handlers.install(saved)


def _result(provider: str, event_type: str, outcome: str, kind: str | None = None) -> Any:
    event = LeasedEvent(1, provider, "e", None, event_type, {}, 1, datetime.now(UTC), None)
    return EventResult(event, outcome, error_kind=kind, error="down" if kind else None)


def test_failures_count_per_key_and_a_success_ends_the_run() -> None:
    results = [
        _result("stripe", "invoice.paid", "failed", "retryable"),
        _result("stripe", "invoice.created", "dead_letter", "handler_error"),
        _result("acme", "a", "processed"),
    ]
    assert circuits.key_outcomes(results, failing={"acme"}) == [
        KeyOutcome("acme", "a", 0),
        KeyOutcome("stripe", "invoice.*", 2, "down"),
    ]


def test_a_healthy_chunk_costs_no_statement() -> None:
    # No failure, and no provider with a run of failures: nothing to record.
    assert circuits.key_outcomes([_result("acme", "a", "processed")], failing=set()) == []


@pytest.mark.parametrize("kind", ["permanent", "transaction_control", "lease_expired"])
def test_an_events_own_fault_is_not_an_outage(kind: str) -> None:
    results = [_result("acme", "a", "dead_letter", kind)]
    assert circuits.key_outcomes(results, failing=set()) == []


def test_a_success_beside_failures_of_the_same_key_breaks_the_run() -> None:
    results = [_result("acme", "a", "failed", "retryable"), _result("acme", "a", "processed")]
    assert circuits.key_outcomes(results, failing=set()) == [KeyOutcome("acme", "a", 0)]
