"""The dev console's words for one request (issue 29): the event for a 2xx, why for the rest,
from the ingest outcome's bounded fields only."""

from __future__ import annotations

from typing import Any

import pytest

from webhook_inbox.errors import (
    AuthenticationFailed,
    InvalidPayload,
    PayloadTooLarge,
    SignatureMismatch,
    UnknownProvider,
)
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox_tools.dev.explain import explain, outcome_summary


def rejected(exc: Any, provider: str | None = "stripe") -> dict[str, Any]:
    outcome = ingest.Outcome(ingest._GENERIC_BODIES[401], "rejected", provider=provider)
    outcome.reason, outcome.detail = exc.reason, exc.detail
    return outcome_summary(outcome)


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (
            AuthenticationFailed("timestamp 96191534s in the past, tolerance 300s", reason="stale"),
            "stale: timestamp 96191534s in the past, tolerance 300s",
        ),
        (SignatureMismatch("no v1 signature matched"), "no matching signature"),
        (SignatureMismatch("signature did not verify"), "another secret than the one configured"),
        (AuthenticationFailed("missing header stripe-signature"), "bad signature: missing header"),
        (InvalidPayload("body is not valid base64"), "invalid payload: body is not valid base64"),
        (PayloadTooLarge("body over the limit"), "body too large"),
    ],
    ids=["stale", "mismatch", "no-verify", "missing", "base64", "size"],
)
def test_a_refusal_says_why(exc: Any, words: str) -> None:
    assert words in explain(401, rejected(exc), provider="stripe")


def test_an_unknown_provider_is_named() -> None:
    said = explain(404, rejected(UnknownProvider("no such provider"), None), provider="nope")
    assert said.startswith("unknown provider 'nope'")


def test_an_accepted_event_shows_its_id_and_type() -> None:
    outcome = ingest.Outcome(ingest._ACCEPTED, "accepted", provider="stripe")
    outcome.event_id, outcome.event_type, outcome.events, outcome.new_events = "evt_1", "t", 3, 2
    said = explain(202, outcome_summary(outcome), provider="stripe")
    assert said == "accepted stripe/evt_1 [t] and 2 more in the batch (2 new)"


def test_answers_the_gateway_gives_itself_say_why_too() -> None:
    assert "traceback" in explain(500, None, provider="stripe")
    assert "6 MB" in explain(413, None, provider="stripe")


def test_a_get_that_is_no_challenge_is_named() -> None:
    outcome = {"outcome": "rejected", "reason": "method", "detail": "a GET that is no challenge"}
    assert explain(405, outcome, provider="stripe").startswith("not a challenge: a GET")
