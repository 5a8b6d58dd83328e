"""What the console says about one request: the answer and, for a 4xx or 5xx, why in words.

Built from the ingest outcome's bounded fields (the ones its log line carries: provider, event
id and type, reason, detail), never from the body or the headers, so the console never shows a
secret or payload content.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The fields of ingest's Outcome the worker passes back beside the response.
OUTCOME_FIELDS = (
    "outcome", "reason", "detail", "provider", "event_id", "event_type", "events", "new_events",
    "enqueue_failed", "delivery_id",
)  # fmt: skip

_MISMATCH_WORDS = ("did not match", "did not verify", "matched")


def outcome_summary(outcome: Any) -> dict[str, Any]:
    return {name: getattr(outcome, name, None) for name in OUTCOME_FIELDS}


def explain(status: int, outcome: Mapping[str, Any] | None, *, provider: str) -> str:
    """Why ``status``: the event for a 2xx, the reason for anything else."""
    if outcome is None:
        return _without_outcome(status)
    detail = outcome.get("detail") or ""
    event = _event(outcome)
    kind, reason = outcome.get("outcome"), outcome.get("reason")
    if kind == "accepted":
        text = f"accepted {event}{_batch(outcome)}"
    elif kind == "duplicate":
        text = f"duplicate of {event}{_batch(outcome)}, nothing new stored"
    elif kind == "handshake":
        return f"handshake answered for {provider} (not stored)"
    elif kind == "rejected":
        return _rejection(reason, detail, provider)
    elif kind == "unavailable":
        what = {"store": "the database", "providers_registry": "the providers registry"}
        return f"{what.get(reason or '', 'a secret')} is unavailable: {detail} (the sender retries)"
    else:
        return f"internal error: {detail or 'see the lines above'}"
    if outcome.get("enqueue_failed") or detail:
        text += f"; {detail}"
    return text


def _event(outcome: Mapping[str, Any]) -> str:
    return f"{outcome.get('provider')}/{outcome.get('event_id')} [{outcome.get('event_type')}]"


def _batch(outcome: Mapping[str, Any]) -> str:
    events = outcome.get("events") or 0
    return (
        f" and {events - 1} more in the batch ({outcome.get('new_events')} new)"
        if events > 1
        else ""
    )


# Rejections explained by their detail and a hint.
_REJECTIONS = {
    "stale": "stale: {detail} (signed too long ago, or the clocks differ)",
    "size": "body too large: {detail} (MAX_BODY_BYTES)",
    "no_live_secret": "no live secret: {detail}",
    "method": "not a challenge: {detail} (senders deliver by POST)",
}


def _rejection(reason: str | None, detail: str, provider: str) -> str:
    if reason == "unknown_provider":
        return (
            f"unknown provider {provider!r}: not one this dev serves (`webhook-inbox providers "
            f"add {provider} --scheme SCHEME --secret-stdin` adds it, or its providers file)"
        )
    if reason in _REJECTIONS:
        return _REJECTIONS[reason].format(detail=detail)
    if reason == "signature":
        if any(words in detail for words in _MISMATCH_WORDS):
            return (
                f"no matching signature: {detail} (signed with another secret than the one "
                f"configured for {provider}?)"
            )
        return f"bad signature: {detail}"
    return f"invalid payload: {detail}"


def _without_outcome(status: int) -> str:
    """Answers the gateway gives itself, or a function that raised."""
    return {
        404: "not a webhook route: POST /webhooks/{provider}",
        413: "body too large: over Lambda's 6 MB synchronous payload",
        500: "the ingest function raised (its traceback is above)",
        502: "the ingest environment died mid-request",
        503: "no ingest environment answered in time",
    }.get(status, "")
