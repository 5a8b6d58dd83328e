"""What ``webhook-inbox check-handlers`` proves of one handler, each on a fresh database through
the real processor, by comparing snapshots of the application's tables and the outbox:

- ``duplicate``: the same payload arriving twice as two events (a redelivery under a new id, which
  the inbox's key cannot catch) ends as one run does;
- ``replay``: an operator's replay of an event already processed changes nothing;
- ``out_of_order``: an older version processed after a newer one leaves the newer state (needs
  the field that carries the version: the sample's, or ``--version-field``);
- ``failure_rollback``: a failure after the handler's writes rolls them back, and the retry ends
  as one clean run does;
- ``concurrent``: two events for the same object, processed at once by two processors, end as
  processing them one after the other does, in one order or the other (serializable).

Volatile columns (timestamps) are left out of the comparison: a handler that stamps
``updated_at = now()`` is still idempotent.
"""

from __future__ import annotations

import copy
import multiprocessing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook_inbox.errors import ConfigurationError, RetryableEventError
from webhook_inbox.processing.domain import Handler, LeasedEvent
from webhook_inbox.store.inbox import NewEvent
from webhook_inbox_tools.handler_lab import lab
from webhook_inbox_tools.handler_lab.lab import Lab, Snapshot


class LabError(RuntimeError):
    """A schedule could not be run as written (not a verdict on the handler)."""


PROPERTIES = ("duplicate", "replay", "out_of_order", "failure_rollback", "concurrent")
INJECTED = "check-handlers: a failure injected after the handler's writes"


@dataclass(frozen=True)
class Case:
    """One handler to check: its key, the handlers map it lives in (by import path, so a second
    process can load it), and the event it is checked with."""

    provider: str
    event_type: str
    handlers_path: str  # "module:attribute"
    event_id: str
    payload: Any
    version_path: str | None = None


@dataclass
class Verdict:
    property: str
    status: str  # PASS | FAIL | SKIP
    schedule: str
    differences: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "status": self.status,
            "schedule": self.schedule,
            "differences": self.differences,
        }


def load_handlers(path: str) -> Mapping[tuple[str, str], Handler]:
    """The handlers map ``module:attribute`` names, imported with the current folder first on
    the path (as ``python -m`` would), so an application that is not installed is found."""
    import importlib
    import os
    import sys

    module_name, _, attribute = path.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found = getattr(importlib.import_module(module_name), attribute or "HANDLERS")
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load the handlers map {path}: {exc}") from None
    if not isinstance(found, Mapping):
        raise ConfigurationError(f"{path} is not a map of (provider, type) to handler")
    handlers: Mapping[tuple[str, str], Handler] = found
    return handlers


def _event(case: Case, suffix: str = "", payload: Any = None) -> NewEvent:
    body = case.payload if payload is None else payload
    return NewEvent(case.event_id + suffix, case.event_type, body)


def newer(case: Case, version_path: str) -> Any:
    """The case's payload one version later (the version field plus one)."""
    payload = copy.deepcopy(case.payload)
    *parents, leaf = version_path.split(".")
    node = payload
    for key in parents:
        node = node[key]
    node[leaf] = int(node[leaf]) + 1
    return payload


def _run(lab_: Lab, case: Case, steps: Callable[[str], None]) -> Snapshot:
    url = lab_.database()
    lab.use_database(url, load_handlers(case.handlers_path))
    steps(url)
    return lab_.snapshot(url)


def _processing_each(provider: str, events: list[NewEvent]) -> Callable[[str], None]:
    return lambda url: _process_each(url, provider, events)


def _process_each(url: str, provider: str, events: list[NewEvent]) -> None:
    for row_id in lab.store(url, provider, events):
        lab.process([row_id])


def check(lab_: Lab, case: Case) -> list[Verdict]:
    """Every property of :data:`PROPERTIES` for ``case``."""
    once = _run(lab_, case, _processing_each(case.provider, [_event(case)]))
    verdicts = [
        _compare(
            "duplicate",
            "the event, then the same payload again as a new event",
            once,
            _run(
                lab_, case, _processing_each(case.provider, [_event(case), _event(case, "-again")])
            ),
        ),
        _compare(
            "replay",
            "the event, then an operator's replay of it",
            once,
            _run(lab_, case, lambda url: _replayed(url, case)),
        ),
        _out_of_order(lab_, case),
        _compare(
            "failure_rollback",
            "the event failing after its handler's writes, then its retry",
            once,
            _run(lab_, case, lambda url: _failed_then_retried(url, case)),
        ),
        _concurrent(lab_, case),
    ]
    return verdicts


def _compare(
    name: str, schedule: str, expected: Snapshot, actual: Snapshot, *, tables_only: bool = False
) -> Verdict:
    if tables_only:
        expected, actual = Snapshot(expected.tables, []), Snapshot(actual.tables, [])
    found = expected.differences(actual)
    return Verdict(name, "FAIL" if found else "PASS", schedule, found)


def _replayed(url: str, case: Case) -> None:
    (row_id,) = lab.store(url, case.provider, [_event(case)])
    lab.process([row_id])
    _replay(url, row_id)
    lab.process([row_id])


def _failed_then_retried(url: str, case: Case) -> None:
    from webhook_inbox.processing import handlers

    original = handlers.HANDLERS[(case.provider, case.event_type)]

    def fails_after_writing(conn: Any, event: LeasedEvent) -> None:
        original(conn, event)
        raise RetryableEventError(INJECTED)

    handlers.register(case.provider, case.event_type, fails_after_writing, replace=True)
    try:
        (row_id,) = lab.store(url, case.provider, [_event(case)])
        outcomes = lab.process([row_id])
    finally:
        handlers.register(case.provider, case.event_type, original, replace=True)
    if outcomes != ["failed"]:
        raise LabError(f"the injected failure ended as {outcomes}, not as a retry")
    _replay(url, row_id)  # due now, as its retry is once its backoff ends
    lab.process([row_id])


def _replay(url: str, row_id: int) -> None:
    """The operator's replay (``webhook-inbox replay``): back to ``received``, audited."""
    import psycopg

    from webhook_inbox.operations import actions

    with psycopg.connect(url) as conn:
        done = actions.replay_event(
            conn, row_id, operator="check-handlers", reason="handler check", dry_run=False
        )
    if done.outcome != "replayed":
        raise LabError(f"replay of row {row_id}: {done.outcome} {done.detail}")


def _out_of_order(lab_: Lab, case: Case) -> Verdict:
    schedule = "a newer version, then the older one"
    if not case.version_path:
        return Verdict(
            "out_of_order",
            "SKIP",
            schedule,
            [
                "no field carries this type's version: name it with "
                f"--version-field {case.provider}:{case.event_type}=PATH"
            ],
        )
    older = _event(case)
    later = _event(case, "-newer", newer(case, case.version_path))
    in_order = _run(lab_, case, _processing_each(case.provider, [older, later]))
    reversed_ = _run(lab_, case, _processing_each(case.provider, [later, older]))
    return _compare("out_of_order", schedule, in_order, reversed_, tables_only=True)


def _concurrent(lab_: Lab, case: Case) -> Verdict:
    """Serializable: what two processors make of a pair at once is what processing the pair one
    after the other makes, in one order or the other."""
    if case.version_path:
        pair = [_event(case), _event(case, "-newer", newer(case, case.version_path))]
        schedule = "an event and its newer version, by two processors at once"
    else:
        pair = [_event(case), _event(case, "-again")]
        schedule = "an event and the same payload as a new event, by two processors at once"
    orders = [
        _run(lab_, case, _processing_each(case.provider, events)) for events in (pair, pair[::-1])
    ]
    url = lab_.database()
    row_ids = lab.store(url, case.provider, pair)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(row_ids))
    workers = [
        context.Process(target=_process_at_once, args=(url, case.handlers_path, row_id, barrier))
        for row_id in row_ids
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    if any(worker.exitcode != 0 for worker in workers):
        return Verdict("concurrent", "FAIL", schedule, ["a processor failed (see its output)"])
    at_once = lab_.snapshot(url)
    verdicts = [
        _compare("concurrent", schedule, order, at_once, tables_only=True) for order in orders
    ]
    return next((v for v in verdicts if v.status == "PASS"), verdicts[0])


def _process_at_once(url: str, handlers_path: str, row_id: int, barrier: Any) -> None:
    """One of two processors: waits for the other, then processes its row (a child process)."""
    lab.quiet_runtime()
    lab.use_database(url, load_handlers(handlers_path))
    barrier.wait(timeout=60)
    lab.process([row_id], owner=f"handler-lab-{row_id}")
