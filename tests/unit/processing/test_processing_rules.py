"""Pure rules of the processor: lease sizing, message parsing, SQS delays, error descriptions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from webhook_inbox import wakeups
from webhook_inbox.config import load
from webhook_inbox.errors import ConfigurationError, PermanentEventError, StoreError
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing import domain, handlers, passes
from webhook_inbox.settings import ProcessorSettings
from webhook_inbox.store.inbox import LeasedEvent


@pytest.mark.parametrize("remaining_ms", [0, -5_000, 1, 999])
def test_a_lease_is_positive_whatever_time_the_context_reports(remaining_ms: int) -> None:
    assert processing.lease_seconds_for(remaining_ms) >= processing.MIN_LEASE_SECONDS > 0


def test_a_lease_outlives_the_invocation_by_the_margin() -> None:
    assert processing.lease_seconds_for(600_000) == 600 + processing.LEASE_MARGIN_SECONDS


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"id": 42}', [42]),
        ('{"id": 0}', None),
        ('{"id": -1}', None),
        ('{"id": "42"}', None),
        ('{"id": true}', None),
        ('{"id": 4.2}', None),
        ("[42]", None),
        ("not json", None),
        ("", None),
        # The sweeper's re-wakes (issue 24, item 2): every id valid, 1 to 25 of them.
        ('{"ids": [7, 3, 7]}', [3, 7]),
        ('{"ids": [42]}', [42]),
        ('{"ids": []}', None),
        ('{"ids": [1, 0]}', None),
        ('{"ids": [1, "2"]}', None),
        ('{"ids": [1, true]}', None),
        ('{"ids": 5}', None),
        ('{"id": 1, "ids": [2]}', None),
        ('{"ids": [' + ", ".join(str(n) for n in range(1, 27)) + "]}", None),
    ],
)
def test_only_positive_integer_ids_make_a_message(body: str, expected: list[int] | None) -> None:
    assert wakeups.parse_body(body) == expected


def test_a_re_wake_body_parses_back_and_holds_at_most_its_limit() -> None:
    most = list(range(1, wakeups.MAX_IDS_PER_MESSAGE + 1))
    assert wakeups.parse_body(wakeups.rewake_body(most)) == most
    with pytest.raises(ValueError, match="1 to 25"):
        wakeups.rewake_body([*most, 99])
    with pytest.raises(ValueError, match="1 to 25"):
        wakeups.rewake_body([])


@pytest.mark.parametrize(
    ("delay", "expected"),
    [(0.2, 2), (4.0, 5), (4.01, 6), (898.0, 899), (899.0, 900), (899.5, None), (3600.0, None)],
)
def test_sqs_delay_never_wakes_a_row_before_it_is_due(delay: float, expected: int | None) -> None:
    sqs_delay = processing.sqs_delay_for(delay)
    assert sqs_delay == expected
    if sqs_delay is not None:
        assert delay < sqs_delay <= processing.SQS_MAX_DELAY_SECONDS


def test_an_unexpected_exception_is_described_without_its_message() -> None:
    def handler() -> None:
        raise KeyError("4242-4242-4242-4242")

    with pytest.raises(KeyError) as caught:
        handler()
    kind, message = passes.describe_error(caught.value)
    assert kind == "handler_error"
    assert message.startswith("KeyError in handler (test_processing_rules.py:")
    assert "4242" not in message


def test_our_own_errors_keep_their_message_and_kind() -> None:
    assert passes.describe_error(PermanentEventError("payload lacks data")) == (
        "permanent",
        "payload lacks data",
    )
    assert passes.describe_error(StoreError("DivisionByZero: 22012")) == (
        "store_error",
        "DivisionByZero: 22012",
    )
    assert len(passes.describe_error(PermanentEventError("x" * 5000))[1]) == 500


def test_settings_come_from_the_environment_with_documented_defaults() -> None:
    assert load(ProcessorSettings, {}) == ProcessorSettings(
        queue_url="", max_attempts=8, retry_base_seconds=5.0, retry_max_seconds=3600.0
    )
    custom = load(
        ProcessorSettings,
        {"PROCESSING_QUEUE_URL": "https://q", "MAX_ATTEMPTS": "3", "RETRY_BASE_SECONDS": "1.5"},
    )
    assert (custom.queue_url, custom.max_attempts, custom.retry_base_seconds) == (
        "https://q",
        3,
        1.5,
    )
    with pytest.raises(ConfigurationError):
        load(ProcessorSettings, {"MAX_ATTEMPTS": "0"})
    with pytest.raises(ConfigurationError):
        load(ProcessorSettings, {"RETRY_MAX_SECONDS": "soon"})


def _event(provider: str = "stripe", event_id: str = "evt_1") -> LeasedEvent:
    now = datetime.now(UTC)
    return LeasedEvent(1, provider, event_id, None, "t", {}, 1, now, now)


def test_deduplication_keys_are_stable_and_bounded() -> None:
    assert domain.deduplication_key(_event(), "customer.created") == "stripe:evt_1:customer.created"
    long_key = domain.deduplication_key(_event(event_id="e" * 255), "t" * 300)
    assert long_key.startswith("sha256:")
    assert long_key == domain.deduplication_key(_event(event_id="e" * 255), "t" * 300)


def test_payload_accessors_name_the_path_never_the_value() -> None:
    payload = {"data": {"object": {"id": "cus_1", "count": True, "name": "x" * 300}}}
    assert domain.required_field(payload, "data.object.id", str) == "cus_1"
    assert domain.optional_field(payload, "data.object.missing", str) is None
    with pytest.raises(PermanentEventError, match=r"^payload lacks data\.nothing$"):
        domain.required_field(payload, "data.nothing", str)
    with pytest.raises(PermanentEventError, match="is not a int"):
        domain.required_field(payload, "data.object.count", int)
    with pytest.raises(PermanentEventError, match=r"1\.\.255 characters$"):
        domain.required_field(payload, "data.object.name", str, max_length=255)


def test_register_refuses_to_replace_a_handler_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "HANDLERS", dict(handlers.HANDLERS))

    def mine(conn: object, event: object) -> None:
        return None

    handlers.register("acme", "order.paid", mine)
    assert handlers.handler_for("acme", "order.paid") is mine
    with pytest.raises(ConfigurationError):
        handlers.register("acme", "order.paid", mine)
    handlers.register("acme", "order.paid", mine, replace=True)
    assert handlers.handler_for("acme", "order.unknown") is None
