"""The per-handler circuit breaker, the processor's side: after each chunk, every handler key's
outcomes extend or end its run of consecutive failures (:func:`settle`).

A downstream outage fails every event of the handlers that call it. Without a breaker each of
those events spends its attempts on the retry schedule (eight within about ten minutes by
default) and dead-letters. With it, a key's first failure gives it a circuit (a pause of the
key, :mod:`webhook_inbox.store.pauses`): the events that failed are held rather than retried —
no attempt, no lease — while new events still run and test the handler. A success closes the
circuit and the sweeper releases the held events in arrival order; the key is back. At
``CIRCUIT_FAILURE_THRESHOLD`` consecutive failures the circuit opens: new events are held too,
and the sweeper lets one held event through per cool-down (``maintenance/circuit_probes.py``)
until one succeeds. A circuit that never opened is resumed once its key has been quiet for
``CIRCUIT_WINDOW_SECONDS``, so a lone failure is retried. Each event of an outage fails at most
once (a probe once more) before the downstream is back; dead letters are left for events that
fail while their handler succeeds on others: poison, not an outage.

Counted as failures: ``failed``, and ``dead_letter`` of a retryable kind (attempts spent). A
permanent error or a handler that took the transaction is the event's fault, not the
downstream's. The bookkeeping is one statement, sent only when the chunk had a failure or a
success of a provider with a run of failures (the lease says which): none in a healthy stack.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from webhook_inbox import observability
from webhook_inbox.errors import PermanentEventError, StoreError
from webhook_inbox.processing import handlers
from webhook_inbox.processing.passes import EventResult
from webhook_inbox.settings import CircuitSettings
from webhook_inbox.store import db, pauses
from webhook_inbox.store.pauses import CircuitChange, KeyOutcome

logger = observability.lean_logger()

# Dead letters that say nothing about the downstream: the event's own fault.
_NOT_AN_OUTAGE = {PermanentEventError.kind, "transaction_control", "lease_expired"}
# Outcomes that neither extend a run of failures nor, with no run to end, end one.
_HEALTHY = {"processed", "ignored", "lease_lost", "unfinished", "deferred"}


def key_outcomes(results: Iterable[EventResult], *, failing: set[str]) -> list[KeyOutcome]:
    """Per handler key: how many of its events failed, or 0 when one of them succeeded (a
    success breaks the run: the failures beside it are the events' own). Successes of
    providers with no run of failures are left out: there is nothing to end."""
    if not failing and all(r.outcome in _HEALTHY for r in results):
        return []  # the common case: no handler key lookup per event
    failures: dict[tuple[str, str], int] = {}
    errors: dict[tuple[str, str], str | None] = {}
    processed: set[tuple[str, str]] = set()
    for result in results:
        event = result.event
        key_type = handlers.key_for(event.provider, event.event_type)
        if key_type is None:
            continue
        key = (event.provider, key_type)
        if result.outcome == "processed":
            processed.add(key)
        elif result.outcome == "failed" or (
            result.outcome == "dead_letter" and result.error_kind not in _NOT_AN_OUTAGE
        ):
            failures[key] = failures.get(key, 0) + 1
            errors[key] = result.error
    succeeded = {key for key in processed if key[0] in failing or key in failures}
    return [
        KeyOutcome(*key, 0) if key in succeeded else KeyOutcome(*key, failures[key], errors[key])
        for key in sorted(succeeded | set(failures))
    ]


def settle(
    conn: psycopg.Connection[Any],
    results: list[EventResult],
    *,
    failing: set[str],
    settings: CircuitSettings,
) -> list[CircuitChange]:
    """Record the chunk's outcomes per key (after its commit); open and close circuits by them.

    A failure here loses nothing but a count: the run is extended by the next failure.
    """
    outcomes = key_outcomes(results, failing=failing)
    if not outcomes:
        return []
    try:
        changes = pauses.record_handler_outcomes(
            conn,
            outcomes,
            threshold=settings.circuit_failure_threshold,
            window_seconds=settings.circuit_window_seconds,
            cooldown_seconds=settings.circuit_cooldown_seconds,
        )
    except StoreError as exc:
        db.discard_connection()
        logger.warning("handler outcomes not recorded", extra={"error_kind": type(exc).__name__})
        return []
    for change in changes:
        # One line per circuit change, never one per event: the alarm pages on the metric.
        logger.warning(
            f"circuit {change.change}",
            extra={"provider": change.provider, "handler_key": change.event_type},
        )
    return changes
