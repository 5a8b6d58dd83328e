"""Handler keys with patterns: `invoice.*` and `*` beside exact types, the most specific key
winning, a `*` anywhere else refused when the map is installed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.processing import handlers


def _handler(name: str) -> Any:
    def handle(conn: Any, event: Any) -> None:
        raise AssertionError("not run here")

    handle.__name__ = name
    return handle


EXACT, INVOICES, PAYMENTS, ANY = (_handler(n) for n in ("exact", "invoices", "payments", "any"))


@pytest.fixture
def routed() -> Iterator[None]:
    saved = dict(handlers.HANDLERS)
    handlers.clear()
    handlers.install(
        {
            ("stripe", "invoice.paid"): EXACT,
            ("stripe", "invoice.*"): INVOICES,
            ("stripe", "invoice.payment_*"): PAYMENTS,
            ("stripe", "*"): ANY,
        }
    )
    yield
    handlers.clear()
    handlers.install(saved)


@pytest.mark.parametrize(
    ("event_type", "expected"),
    [
        ("invoice.paid", EXACT),  # the exact key beats every pattern
        ("invoice.payment_failed", PAYMENTS),  # the longest matching prefix
        ("invoice.created", INVOICES),
        ("customer.created", ANY),  # the provider's catch-all
        ("", ANY),
    ],
)
def test_the_most_specific_key_wins(routed: None, event_type: str, expected: Any) -> None:
    assert handlers.handler_for("stripe", event_type) is expected


def test_a_pattern_is_per_provider(routed: None) -> None:
    assert handlers.handler_for("github", "invoice.paid") is None


def test_without_a_catch_all_an_unmatched_type_has_no_handler() -> None:
    saved = dict(handlers.HANDLERS)
    handlers.clear()
    try:
        handlers.install({("acme", "order.*"): INVOICES})
        assert handlers.handler_for("acme", "order.paid") is INVOICES
        assert handlers.handler_for("acme", "orders.paid") is None  # a prefix, not a glob
        assert handlers.handler_for("acme", "refund.created") is None
    finally:
        handlers.clear()
        handlers.install(saved)


@pytest.mark.parametrize(
    "key", [("stripe", "*.paid"), ("stripe", "invoice.*.paid"), ("*", "invoice.paid")]
)
def test_a_star_anywhere_but_the_end_is_refused_at_install(key: tuple[str, str]) -> None:
    saved = dict(handlers.HANDLERS)
    try:
        with pytest.raises(ConfigurationError, match="only ends an event type"):
            handlers.install({key: ANY})
        assert key not in handlers.HANDLERS
    finally:
        handlers.clear()
        handlers.install(saved)


@pytest.mark.usefixtures("routed")
def test_the_key_of_the_chosen_handler_names_the_circuit_it_counts_towards() -> None:
    # The circuit breaker counts failures per key: the key whose handler runs, pattern and all.
    assert handlers.key_for("stripe", "invoice.paid") == "invoice.paid"
    assert handlers.key_for("stripe", "invoice.payment_failed") == "invoice.payment_*"
    assert handlers.key_for("stripe", "invoice.created") == "invoice.*"
    assert handlers.key_for("stripe", "charge.refunded") == "*"
    assert handlers.key_for("github", "push") is None
