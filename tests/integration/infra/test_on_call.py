"""On call: every failure class pages through exactly one alarm, designed behaviour
pages nobody, whatever LogLevel and SystemLogLevel say, and every RUNBOOK query finds its evidence.

The real handlers run in-process (real PostgreSQL, moto) to produce the lines each outcome
writes; a failure that is Lambda's own (a timeout, a memory kill, a throttle, an uncaught
exception) adds the metric and the line Lambda writes for it. Each class of the RUNBOOK's table
becomes a 30-minute timeline over healthy traffic (tests/on_call_scenarios.py); its lines pass
through a model of Lambda's JSON log-level filter for every allowed level combination, become
metrics through the template's metric filters and EMF, and every alarm of the template is
evaluated over them (tests/alarm_model.py).
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import re
import shlex
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import boto3
import psycopg
import pytest
from moto import mock_aws

from bench.cost_child import _stripe_id
from bench.stripe_events import stripe_body
from tests.alarm_model import (
    STACK,
    filter_matches,
    level_combinations,
    platform_report,
    query_clauses,
    query_fields,
    runtime_error_line,
    template_alarms,
)
from tests.cert_authority import leaf
from tests.infra_support import load_template
from tests.ingest_support import v2_event
from tests.integration.processing.helpers import sqs_event_for, store_event
from tests.on_call_scenarios import (
    CLASSES,
    FUNCTIONS,
    MAX_RECEIVES,
    Row,
    Run,
    Timeline,
    evidence_query,
    expected_alarm,
    healthy,
    runbook,
    runbook_queries,
    table_rows,
)
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import aws, config, observability, settings
from webhook_inbox.errors import PermanentEventError, RetryableEventError
from webhook_inbox.ingest import pipeline as ingest
from webhook_inbox.ingest import provider_registry, provider_source, providers
from webhook_inbox.maintenance import publishers, registry_check
from webhook_inbox.processing import batch as processing
from webhook_inbox.processing import handlers, pacing
from webhook_inbox.store import db

MISSING_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone-AbCdEf"
UNREACHABLE = "postgresql://nobody@127.0.0.1:9/nothing?connect_timeout=1"


# --- the real lines -------------------------------------------------------------------------


class Recorder:
    """Every line the functions write: the shared Powertools handler's stream and stdout."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.buffer = io.StringIO()
        self.capsys = capsys

    def take(self) -> list[dict[str, Any]]:
        text = self.buffer.getvalue() + "\n" + self.capsys.readouterr().out
        self.buffer.seek(0)
        self.buffer.truncate()
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def invoke(self, function: str, call: Callable[[], Any]) -> Run:
        try:
            answer = call()
        except Exception:  # noqa: BLE001 - the invocation fails: Lambda counts an error
            return Run(function, self.take(), raised=True)
        return Run(function, self.take(), answer=answer)


def _fails(_conn: psycopg.Connection[Any], _event: Any) -> None:
    raise RetryableEventError("the dependency is not ready")


def _refuses(_conn: psycopg.Connection[Any], _event: Any) -> None:
    raise PermanentEventError("unsupported version")


@pytest.fixture
def runs(
    database_url: str,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Run]:
    """Each outcome the on-call classes need, from the real functions."""
    recorder = Recorder(capsys)
    handler = observability.lean_logger().registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(recorder.buffer)
    monkeypatch.setattr(handlers, "HANDLERS", dict(handlers.HANDLERS))
    try:
        with mock_aws():
            sqs = boto3.client("sqs", region_name="us-east-1")
            queue = sqs.create_queue(QueueName="processing")["QueueUrl"]
            for name, value in {
                "PROVIDERS_CONFIG_FILE": "events/providers.local.json",
                "PROCESSING_QUEUE_URL": queue,
                "POWERTOOLS_METRICS_NAMESPACE": "WebhookInbox",
                "POWERTOOLS_SERVICE_NAME": STACK,
                "OUTBOX_DESTINATION": "eventbridge",
                "OUTBOX_EVENT_BUS_NAME": "default",
                "MAX_ATTEMPTS": "3",
            }.items():
                monkeypatch.setenv(name, value)
            monkeypatch.delenv("PROVIDERS_CONFIG", raising=False)
            monkeypatch.setattr(processing, "sqs_client", lambda: sqs)
            # Built at the processing module's import, under the test session's namespace.
            monkeypatch.setattr(processing.metrics, "namespace", "WebhookInbox")
            providers.reset_for_tests()
            db.reset_for_tests()
            now = int(time.time())
            monkeypatch.setattr(ingest, "current_time", lambda: float(now))
            ingest_app, processor_app, sweeper_app = (
                load_function(name) for name in ("ingest", "processor", "sweeper")
            )
            ingest_app.reset_clients()
            handlers.HANDLERS[("stripe", "invoice.payment_failed")] = _fails
            handlers.HANDLERS[("stripe", "invoice.finalized")] = _refuses
            stripe = providers.registry()["stripe"]

            def delivery(timestamp: int = now, *, tamper: bool = False) -> dict[str, Any]:
                body = stripe_body(_stripe_id(), now)
                signed = providers.sign_delivery(stripe, body, timestamp=timestamp)
                return v2_event("stripe", body + (b" " if tamper else b""), signed.headers)

            def deliver(event: dict[str, Any]) -> Run:
                return recorder.invoke(
                    "ingest", lambda: ingest_app.handler(event, FakeLambdaContext())
                )

            def process(row_ids: list[int], receive: int = 1) -> Run:
                event = sqs_event_for(row_ids)
                for record in event["Records"]:  # the n-th receive of each message
                    record["attributes"]["ApproximateReceiveCount"] = str(receive)
                return recorder.invoke(
                    "processor", lambda: processor_app.handler(event, FakeLambdaContext())
                )

            def sweep() -> Run:
                return recorder.invoke(
                    "sweeper",
                    lambda: sweeper_app.handler(load_event("schedule"), FakeLambdaContext()),
                )

            found: dict[str, Run] = {}
            first = delivery()
            found["accepted"] = deliver(first)
            found["duplicate"] = deliver(first)
            found["rejected_signature"] = deliver(delivery(tamper=True))
            found["rejected_stale"] = deliver(delivery(timestamp=now - 10_000))
            with monkeypatch.context() as patch:
                patch.setattr(aws, "send_wakeup", lambda *_: "EndpointConnectionError")
                found["enqueue_failed"] = deliver(delivery())
            # The sample SNS provider pins its certificates: one it never pinned is a 503.
            sns = providers.registry()["sns"]
            new_pin = leaf().pin(
                "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-new.pem"
            )
            unpinned = sns.scheme.sign(new_pin, b"{}", timestamp=now)
            found["ingest_503_sender"] = deliver(v2_event("sns", unpinned.body, unpinned.headers))
            # Ingest's accepted line names the event, not its row: the row from the database.
            rows = [
                conn.execute(
                    "SELECT id FROM webhook_events WHERE event_id = %s", (line["event_id"],)
                ).fetchone()[0]
                for line in found["accepted"].lines
            ]
            rows.append(
                store_event(conn, event_type="invoice.payment_failed", payload={"id": "in_1"})
            )
            rows.append(store_event(conn, event_type="charge.unknown", payload={"id": "ch_1"}))
            found["batch"] = process(rows)
            with monkeypatch.context() as patch:  # a paced key turns its second event away
                patch.setattr(pacing, "LIMITS", {})
                patch.setattr(pacing, "_PROVIDERS", set())
                handlers.HANDLERS[("stripe", "invoice.upcoming")] = lambda conn, event: None
                pacing.install({("stripe", "invoice.upcoming"): pacing.Pacing(per_second=1)})
                found["paced_batch"] = process(
                    [
                        store_event(conn, event_type="invoice.upcoming", payload={"id": f"in_{n}"})
                        for n in (3, 4)
                    ]
                )
            found["sweep"] = sweep()
            found.update(_ingest_last_words(recorder, ingest_app, delivery))
            found.update(_sweeps_with_registry(monkeypatch, sweep))
            found["dead_letter"] = process(
                [store_event(conn, event_type="invoice.finalized", payload={"id": "in_2"})]
            )
            found["sweep_with_dead_letters"] = sweep()  # its gauge counts the row
            # A circuit opened ten minutes ago, then an operator's pause of 30 hours: the gauges
            # of the circuit-open and pause-too-old alarms, one at a time.
            conn.execute(
                "INSERT INTO handler_pauses (provider, event_type, reason, paused_by, circuit,"
                " holds_new, paused_at, cooldown_seconds, probe_at) VALUES ('stripe',"
                " 'invoice.finalized', 'circuit open: 5 consecutive failures', 'circuit breaker',"
                " true, true, now() - interval '10 minutes', 60, now() + interval '1 minute')"
            )
            found["sweep_with_open_circuit"] = sweep()
            conn.execute(
                "UPDATE handler_pauses SET circuit = false, cooldown_seconds = NULL,"
                " probe_at = NULL, paused_by = 'alice', paused_at = now() - interval '30 hours'"
            )
            found["sweep_with_old_pause"] = sweep()
            conn.execute("DELETE FROM handler_pauses")
            found["sweep_in_trouble"] = _sweep_in_trouble(conn, sweeper_app, sweep)

            with monkeypatch.context() as patch:
                patch.setenv("PROVIDERS_CONFIG", "{not json")
                patch.delenv("PROVIDERS_CONFIG_FILE")
                providers.reset_for_tests()
                ingest_app.reset_clients()
                found["ingest_500"] = deliver(delivery())
            providers.reset_for_tests()
            ingest_app.reset_clients()

            with monkeypatch.context() as patch:
                patch.setenv("DATABASE_URL", UNREACHABLE)
                db.reset_for_tests()
                found["ingest_503_store"] = deliver(delivery())
                found["sweep_database_down"] = sweep()
                found["processor_store_down"] = process(rows[:1])
                found["processor_store_down_last"] = process(rows[:1], receive=MAX_RECEIVES)
            with monkeypatch.context() as patch:
                patch.delenv("DATABASE_URL")
                patch.setenv("DATABASE_SECRET_ARN", MISSING_SECRET)
                db.reset_for_tests()
                found["ingest_secret"] = deliver(delivery())
                found["processor_secret"] = process(rows[:1])
                found["processor_secret_last"] = process(rows[:1], receive=MAX_RECEIVES)
                found["sweeper_secret"] = sweep()
            db.reset_for_tests()
            providers.reset_for_tests()
            found.update(_registry_unreadable(monkeypatch, ingest_app, deliver, delivery))
    finally:
        handler.setStream(previous)
    return found


def _ingest_last_words(
    recorder: Recorder,
    ingest_app: Any,
    delivery: Callable[[], dict[str, Any]],
) -> dict[str, Run]:
    """What ingest writes before Lambda stops it, its report not kept at IngestSystemLogLevel
    WARN: the watchdog's "timing out" for a delivery still running 0.5 s before its timeout, and
    "memory high" once its peak passes 80 % of its memory size."""
    said = threading.Event()

    def stall(*_: Any, **__: Any) -> Any:
        for _ in range(200):  # bounded: the line is due 0.1 s in
            if '"timing out"' in recorder.buffer.getvalue():
                break
            said.wait(0.05)
        raise RuntimeError("Lambda stops the invocation here")

    original = ingest_app.pipeline.handle
    ingest_app.pipeline.handle = stall
    try:
        event = delivery()
        timing_out = recorder.invoke(
            "ingest", lambda: ingest_app.handler(event, FakeLambdaContext(remaining_ms=600))
        )
    finally:
        ingest_app.pipeline.handle = original
    ingest_app._said_once.clear()
    event = delivery()
    small = recorder.invoke(
        "ingest", lambda: ingest_app.handler(event, FakeLambdaContext(memory_limit_in_mb=16))
    )
    found = {
        "ingest_timing_out": timing_out,
        "ingest_memory_high": Run(
            "ingest", [line for line in small.lines if line.get("message") == "memory high"]
        ),
    }
    assert [line["message"] for line in timing_out.lines] == ["timing out"]
    assert found["ingest_memory_high"].lines, small.lines
    return found


def _registry_unreadable(
    monkeypatch: pytest.MonkeyPatch,
    ingest_app: Any,
    deliver: Callable[[dict[str, Any]], Run],
    delivery: Callable[[], dict[str, Any]],
) -> dict[str, Run]:
    """Ingest with a providers registry (not in use yet: the providers file serves) that
    disappears: a warm environment keeps serving and logs the failed re-read, a new one
    answers 503."""
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    arn = secrets.create_secret(
        Name="ProvidersRegistry-onCall", SecretString=provider_registry.INITIAL_TEXT
    )["ARN"]
    now = [0.0]
    found = {}
    with monkeypatch.context() as patch:
        patch.setenv("PROVIDERS_REGISTRY_ARN", arn)
        patch.setattr(provider_source, "clock", lambda: now[0])
        ingest_app.reset_clients()
        deliver(delivery())  # warm: the registry read once
        secrets.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
        now[0] += settings.DEFAULT_PROVIDERS_REFRESH_S
        found["ingest_registry_refresh_failed"] = deliver(delivery())
        ingest_app.reset_clients()  # a new execution environment
        found["ingest_registry_cold"] = deliver(delivery())
    ingest_app.reset_clients()
    return found


def _sweeps_with_registry(
    monkeypatch: pytest.MonkeyPatch, sweep: Callable[[], Run]
) -> dict[str, Run]:
    """The sweeper's read of the providers registry once a run: one whose provider's every
    secret has expired, one in use with no provider, then one that cannot be read."""
    secrets = boto3.client("secretsmanager", region_name="us-east-1")
    expired = {
        "stripe": {
            "scheme": "stripe",
            "secrets": [{"value": "whsec_gone", "expires_at": "2020-01-01T00:00:00Z"}],
        }
    }
    document = provider_registry.dump_document(provider_registry.RegistryDocument(expired, []))
    arn = secrets.create_secret(Name="ProvidersRegistry-sweeper", SecretString=document)["ARN"]
    found = {}
    with monkeypatch.context() as patch:
        patch.setenv("PROVIDERS_REGISTRY_ARN", arn)
        config.reset()  # the sweeper's settings, read again with the registry's ARN
        # Each run five minutes after the last: the sweeper reads the registry again each time.
        patch.setattr(
            registry_check, "clock", itertools.count(0, registry_check.READ_EVERY_S).__next__
        )
        found["sweep_provider_without_live_secret"] = sweep()
        empty = provider_registry.dump_document(provider_registry.RegistryDocument({}, []))
        secrets.put_secret_value(SecretId=arn, SecretString=empty)
        found["sweep_registry_empty"] = sweep()
        gone = {"scheme": "stripe", "secrets": [{"secret_arn": MISSING_SECRET}]}
        document = provider_registry.RegistryDocument({"stripe": gone}, [])
        secrets.put_secret_value(
            SecretId=arn, SecretString=provider_registry.dump_document(document)
        )
        found["sweep_provider_secret_unreadable"] = sweep()
        secrets.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
        found["sweep_registry_unreadable"] = sweep()
    config.reset()
    return found


class _RefusingBus:
    """A bus that refuses every message, the way a wrong bus policy does."""

    destination = "eventbridge"

    def publish(self, messages: Any, *, keep_going: Any) -> publishers.PublishResult:
        refused = publishers.PublishFailure("AccessDeniedException")
        return publishers.PublishResult(failed={m.id: refused for m in messages})


def _sweep_in_trouble(conn: psycopg.Connection[Any], sweeper_app: Any, sweep: Any) -> Run:
    """A run with something to report on every counter and gauge: the sweeper publishes only
    what is not zero, so a healthy run leaves these metrics out, and this run shows they still
    arrive (at every log level) when there is something to count."""
    expired = store_event(conn, event_type="charge.unknown", payload={"id": "ch_2"})
    conn.execute(
        "UPDATE webhook_events SET status = 'processing', attempts = 1, lease_owner = 'w',"
        " lease_expires_at = now() - interval '1 minute' WHERE id = %s",
        (expired,),
    )
    conn.execute(
        "INSERT INTO outbox_messages (topic, deduplication_key, payload, attempts, created_at)"
        " VALUES ('t', 'k-last-try', '{}', 9, now() - interval '20 minutes'),"
        "        ('t', 'k-first-try', '{}', 0, now() - interval '20 minutes')"
    )
    previous = sweeper_app.publisher
    sweeper_app.publisher = _RefusingBus
    try:
        return cast(Run, sweep())
    finally:
        sweeper_app.publisher = previous


# --- the tests ------------------------------------------------------------------------------


def test_the_table_lists_every_class_and_every_alarm_of_the_template() -> None:
    rows = table_rows()
    assert [row.failure for row in rows] == list(CLASSES)
    named = {row.alarm for row in rows} | {f"{fn}-errors" for fn in FUNCTIONS}
    assert set(template_alarms()) <= named, "an alarm without a failure class in the table"
    anchors = {line[3:].strip() for line in runbook().splitlines() if line.startswith("## ")}
    assert {row.anchor for row in rows if row.anchor} <= anchors


def test_every_failure_class_pages_exactly_its_alarm_at_every_log_level(
    runs: dict[str, Run],
) -> None:
    """The whole contract, for every allowed (LogLevel, SystemLogLevel): the alarm the table
    names is the only one in ALARM (none for designed behaviour), and the table's query finds
    the class's own evidence among the lines that reached CloudWatch."""
    combinations = level_combinations()
    assert len(combinations) >= 4
    rows = {row.failure: row for row in table_rows()}
    wrong: dict[str, Any] = {}  # every class that misbehaves, not only the first
    for levels in combinations:
        calm = healthy(runs, levels)
        assert calm.firing() == set(), ("healthy traffic pages", levels)
        for failure, variants in CLASSES.items():
            row = rows[failure]
            for function, scenario in variants:
                timeline = scenario(runs, levels)
                wanted = expected_alarm(row, function)
                key = f"{failure} [{function}] at {levels}"
                if timeline.firing() != ({wanted} if wanted else set()):
                    wrong[key] = {"pages": sorted(timeline.firing()), "want": wanted}
                    continue
                try:
                    _assert_evidence_found(row, function, timeline, calm)
                except AssertionError as exc:
                    wrong[key] = {"evidence": str(exc)}
    assert wrong == {}


def _assert_evidence_found(row: Row, function: str, timeline: Timeline, calm: Timeline) -> None:
    found = evidence_query(row, function)
    if found is None:
        command = row.evidence.strip("`")
        if command.startswith("webhook-inbox "):
            from webhook_inbox_tools.cli.app import build_parser

            build_parser().parse_args(shlex.split(command)[1:])  # exits on a wrong command
        else:
            assert row.anchor is None, row
            assert command == "—", row
        return
    groups, query = found
    condition = next(c for c in query_clauses(query) if c.startswith("filter "))[7:]
    matched = [
        line
        for g in groups
        for line in timeline.lines.get(g, [])
        if filter_matches(condition, line)
    ]
    assert matched, (row.failure, function, "the evidence query finds nothing", timeline.levels)
    if row.failure != "the sweeper does not run":  # its evidence is the last run's line
        before = [
            line
            for g in groups
            for line in calm.lines.get(g, [])
            if filter_matches(condition, line)
        ]
        assert before == [], (row.failure, "the query also finds healthy traffic")


def test_counting_does_not_depend_on_the_log_levels(runs: dict[str, Run]) -> None:
    """Every metric an alarm or widget uses, produced by the real lines, still arrives at every
    allowed level combination (on 5276659, LogLevel WARNING or ERROR silenced Accepted,
    Duplicate and the EMF summaries, and SystemLogLevel WARN the timeout's only line)."""
    used = set(
        re.findall(r"\b(?:SUM|MAX|MIN|AVG)\((\w+)\) FROM WebhookInbox", json.dumps(load_template()))
    )
    for levels in level_combinations():
        timeline = Timeline(levels)
        for run in runs.values():
            timeline.write(run.function, 0, run.lines)
        arrived = {point.metric for point in timeline.points}
        assert used - arrived == set(), (levels, sorted(used - arrived))
        report = platform_report("r", "timeout")
        assert timeline.kept([report]) == [report], (levels, "a timeout leaves no line")
        last_word = runs["ingest_timing_out"].lines
        assert timeline.kept(last_word, "ingest") == last_word, (levels, "ingest's is dropped")


def test_every_runbook_query_names_fields_the_lines_carry(runs: dict[str, Run]) -> None:
    """Fields of the real lines, Lambda's report and runtime error line, and Logs Insights'
    own; a query naming anything else finds nothing."""
    carried: set[str] = {"@timestamp", "@message", "@log", "@logStream", "@requestId"}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                carried.add(prefix + key)
                walk(inner, f"{prefix}{key}.")

    for line in [line for run in runs.values() for line in run.lines] + [
        platform_report("r", "error", error_type="Runtime.OutOfMemory"),
        runtime_error_line("r", "KeyError"),
    ]:
        walk(line, "")
    queries = runbook_queries()
    assert len(queries) >= 15
    for query in queries:
        unknown = query_fields(query) - carried
        assert unknown == set(), (query, unknown)


def test_every_alarms_entry_names_a_query_or_a_command_that_parses() -> None:
    """Each alarm's RUNBOOK entry (the anchor its description links) gives the evidence: a Logs
    Insights query, or a webhook-inbox command the CLI accepts."""
    from webhook_inbox_tools.cli.app import build_parser

    sections = re.split(r"^## ", runbook(), flags=re.MULTILINE)
    entries = {section.split("\n", 1)[0].strip(): section for section in sections[1:]}
    for resource in load_template()["Resources"].values():
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        link = re.search(
            r"infra/RUNBOOK\.md#([a-z0-9-]+)", resource["Properties"]["AlarmDescription"]
        )
        assert link, resource["Properties"]["AlarmName"]
        entry = entries[link[1]]
        commands = re.findall(r"```sh\n(.*?)```", entry, flags=re.DOTALL)
        queries = re.findall(r"```logs-insights\n(.*?)```", entry, flags=re.DOTALL)
        assert commands or queries, f"#{link[1]} names no query or command"
        for command in commands:
            words = shlex.split(command.strip())
            assert words[0] == "webhook-inbox", command
            build_parser().parse_args(words[1:])
