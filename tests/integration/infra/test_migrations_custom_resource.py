"""The DatabaseSchema custom resource: migrate on Create/Update, no-op Delete, always answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.integration.infra.conftest import ResponseRecorder
from tests.support import FakeLambdaContext, load_event, load_function
from webhook_inbox import config
from webhook_inbox.deploy import custom_resource
from webhook_inbox.store import db
from webhook_inbox.store import migrate as migrate_module
from webhook_inbox.store.migrate import available_migrations

UNREACHABLE_DB = "postgresql://migrator:s3cr3t-pw@127.0.0.1:1/nothing?connect_timeout=2"


@pytest.fixture
def app(pg_server: Any) -> Iterator[Any]:
    yield load_function("migrations")
    # The create request stores role timeouts; the role is shared by every test database.
    with pg_server.admin() as admin:
        admin.execute("ALTER ROLE CURRENT_USER RESET statement_timeout")
        admin.execute("ALTER ROLE CURRENT_USER RESET lock_timeout")


def request(kind: str, url: str, **extra: Any) -> dict[str, Any]:
    event = load_event("migrations-create")
    event.update(RequestType=kind, ResponseURL=url, **extra)
    return event


def every_version() -> list[str]:
    """The runtime's migrations, then the application's (the order the function applies them)."""
    both = [*available_migrations(), *available_migrations("webhook_inbox_app")]
    return [m.version for m in both]


def latest_version() -> str:
    """The runtime's newest migration: SchemaVersion says nothing of the application's."""
    return available_migrations()[-1].version


def test_create_applies_every_migration_and_answers_success(
    app: Any,
    empty_database_url: str,
    response_url: ResponseRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", empty_database_url)
    db.reset_for_tests()

    app.handler(request("Create", response_url.url), FakeLambdaContext())

    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS"
    assert answer["PhysicalResourceId"] == "webhook-inbox-schema"
    assert answer["RequestId"] == "11111111-2222-3333-4444-555555555555"
    assert answer["LogicalResourceId"] == "DatabaseSchema"
    assert answer["StackId"].startswith("arn:aws:cloudformation:")
    assert answer["Data"]["AppliedNow"] == ",".join(every_version())
    assert answer["Data"]["SchemaVersion"] == latest_version()
    # The pre-signed URL was signed for an empty content type.
    assert response_url.requests[0]["content_type"] == ""
    assert response_url.requests[0]["path"].startswith("/cfn-response?X-Amz-Signature=")
    with psycopg.connect(empty_database_url) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        assert versions == sorted(every_version())
        assert conn.execute("SELECT to_regclass('webhook_events') IS NOT NULL").fetchone() == (
            True,
        )
    # The application's timeouts became the role's defaults (RDS Proxy refuses options).
    monkeypatch.setenv("DB_STARTUP_OPTIONS", "off")
    config.reset()  # the settings were read by the migration
    with db.connect(empty_database_url) as fresh:
        assert fresh.execute("SHOW statement_timeout").fetchone() == ("5s",)
        assert fresh.execute("SHOW lock_timeout").fetchone() == ("2s",)


def test_update_is_idempotent_and_keeps_the_physical_id(
    app: Any,
    database_url: str,
    response_url: ResponseRecorder,
) -> None:
    event = request("Update", response_url.url, PhysicalResourceId="webhook-inbox-schema")
    app.handler(event, FakeLambdaContext())
    app.handler(event, FakeLambdaContext())

    answers = response_url.bodies()
    assert [a["Status"] for a in answers] == ["SUCCESS", "SUCCESS"]
    assert {a["PhysicalResourceId"] for a in answers} == {"webhook-inbox-schema"}
    assert [a["Data"]["AppliedNow"] for a in answers] == ["", ""]
    assert answers[0]["Data"]["SchemaVersion"] == latest_version()


def test_delete_answers_success_without_touching_the_database(
    app: Any, response_url: ResponseRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unreachable database proves Delete never connects (it would answer FAILED otherwise).
    monkeypatch.setenv("DATABASE_URL", UNREACHABLE_DB)
    db.reset_for_tests()
    event = request("Delete", response_url.url, PhysicalResourceId="webhook-inbox-schema")

    app.handler(event, FakeLambdaContext())

    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS"
    assert answer["PhysicalResourceId"] == "webhook-inbox-schema"


def test_unreachable_database_answers_failed_without_leaking_the_password(
    app: Any, response_url: ResponseRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", UNREACHABLE_DB)
    db.reset_for_tests()

    started = time.monotonic()
    app.handler(request("Create", response_url.url), FakeLambdaContext())

    (answer,) = response_url.bodies()
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("StoreUnavailable")
    assert "s3cr3t-pw" not in response_url.requests[0]["body"]
    assert time.monotonic() - started < 10


def test_an_edited_applied_migration_fails_the_deploy(
    app: Any,
    database_url: str,
    conn: psycopg.Connection[Any],
    response_url: ResponseRecorder,
) -> None:
    conn.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = '0001'")

    app.handler(request("Update", response_url.url), FakeLambdaContext())

    (answer,) = response_url.bodies()
    assert answer["Status"] == "FAILED"
    assert "MigrationError" in answer["Reason"]
    assert len(answer["Reason"]) <= custom_resource.MAX_REASON_CHARS


def test_the_watchdog_answers_failed_before_the_lambda_times_out(
    response_url: ResponseRecorder,
) -> None:
    release = threading.Event()

    def slow_action(_props: Any) -> dict[str, str]:
        release.wait(timeout=10)
        return {"late": "yes"}

    # 5 s margin + 0.5 s: the watchdog fires about half a second in.
    context = FakeLambdaContext(remaining_ms=int((custom_resource.WATCHDOG_MARGIN_S + 0.5) * 1000))
    worker = threading.Thread(
        target=custom_resource.run,
        args=(request("Create", response_url.url), context),
        kwargs={"on_create_or_update": slow_action, "physical_id": "p"},
    )
    worker.start()
    try:
        assert response_url.arrived.wait(timeout=5), "no answer before the Lambda timeout"
        (answer,) = response_url.bodies()
        assert answer["Status"] == "FAILED"
        assert "timed out" in answer["Reason"]
    finally:
        release.set()
        worker.join(timeout=10)
    # The action finishing later must not send a second, contradicting answer.
    assert [a["Status"] for a in response_url.bodies()] == ["FAILED"]


def test_a_failed_response_put_is_retried(response_url: ResponseRecorder) -> None:
    response_url.fail_next = 1

    custom_resource.run(
        request("Create", response_url.url),
        FakeLambdaContext(),
        on_create_or_update=lambda _props: {"ok": "1"},
        physical_id="p",
    )

    assert [r["status"] for r in response_url.requests] == [500, 200]
    (answer,) = response_url.bodies()
    assert answer["Status"] == "SUCCESS"
    assert answer["Data"] == {"ok": "1"}


def test_an_unknown_request_type_answers_failed(response_url: ResponseRecorder) -> None:
    custom_resource.run(
        request("Upgrade", response_url.url),
        FakeLambdaContext(),
        on_create_or_update=lambda _props: None,
        physical_id="p",
    )
    (answer,) = response_url.bodies()
    assert answer["Status"] == "FAILED"
    assert "RequestType" in answer["Reason"]


def test_the_watchdog_cancels_a_cancellable_action_and_answers_its_real_outcome(
    response_url: ResponseRecorder,
) -> None:
    release = threading.Event()
    events: list[str] = []

    def slow_action(_props: Any) -> dict[str, str]:
        release.wait(timeout=10)
        events.append("action ended")
        raise RuntimeError("cancelled by the watchdog")

    def cancel() -> None:
        events.append(f"cancel, answers so far: {len(response_url.requests)}")
        release.set()

    context = FakeLambdaContext(remaining_ms=int((custom_resource.WATCHDOG_MARGIN_S + 0.3) * 1000))
    custom_resource.run(
        request("Create", response_url.url),
        context,
        on_create_or_update=slow_action,
        physical_id="p",
        cancel=cancel,
    )

    assert events == ["cancel, answers so far: 0", "action ended"]
    (answer,) = response_url.bodies()
    assert answer["Status"] == "FAILED"
    assert "cancelled by the watchdog" in answer["Reason"]


def test_an_action_that_completes_after_the_cancel_answers_success(
    response_url: ResponseRecorder,
) -> None:
    # The cancel came too late (say, the COMMIT was already on its way): the change happened,
    # and CloudFormation must hear SUCCESS, not a FAILED that makes it roll back.
    release = threading.Event()

    def committing_action(_props: Any) -> dict[str, str]:
        release.wait(timeout=10)
        return {"committed": "yes"}

    context = FakeLambdaContext(remaining_ms=int((custom_resource.WATCHDOG_MARGIN_S + 0.3) * 1000))
    custom_resource.run(
        request("Create", response_url.url),
        context,
        on_create_or_update=committing_action,
        physical_id="p",
        cancel=release.set,
    )

    assert [a["Status"] for a in response_url.bodies()] == ["SUCCESS"]


def _slow_migration(monkeypatch: pytest.MonkeyPatch, app: Any) -> None:
    slow = migrate_module.Migration(
        "9999", "slow", "CREATE TABLE slow_marker (n int);\nSELECT pg_sleep(4)"
    )
    monkeypatch.setattr(
        migrate_module, "available_migrations", lambda *_: [*available_migrations(), slow]
    )


def _slow_migration_left_nothing(url: str) -> None:
    with psycopg.connect(url) as check:
        assert check.execute("SELECT to_regclass('slow_marker')").fetchone() == (None,)
        assert check.execute(
            "SELECT count(*) FROM schema_migrations WHERE version = '9999'"
        ).fetchone() == (0,)


def test_a_timed_out_deploy_never_answers_failed_while_the_migration_can_commit(
    app: Any,
    database_url: str,
    response_url: ResponseRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _slow_migration(monkeypatch, app)
    # No deadline of its own: only the watchdog (0.5 s in) can stop the 4 s migration.
    monkeypatch.setattr(app, "DEADLINE_MARGIN_S", -100.0)
    context = FakeLambdaContext(remaining_ms=int((custom_resource.WATCHDOG_MARGIN_S + 0.5) * 1000))
    worker = threading.Thread(
        target=app.handler, args=(request("Update", response_url.url), context)
    )
    worker.start()
    try:
        assert response_url.arrived.wait(timeout=5), "no answer before the Lambda timeout"
        (answer,) = response_url.bodies()
        assert answer["Status"] == "FAILED"
        assert "QueryCanceled" in answer["Reason"]
        # Answered after the transaction was gone, not while it could still commit.
        _slow_migration_left_nothing(database_url)
    finally:
        worker.join(timeout=10)
    time.sleep(0.5)
    _slow_migration_left_nothing(database_url)


def test_a_deploy_stops_its_migration_at_its_deadline_and_reports_the_real_error(
    app: Any,
    database_url: str,
    response_url: ResponseRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _slow_migration(monkeypatch, app)
    # The runner's deadline falls 1 s in, the watchdog 4 s in.
    remaining_s = custom_resource.WATCHDOG_MARGIN_S + app.DEADLINE_MARGIN_S + 1.0
    started = time.monotonic()

    app.handler(request("Update", response_url.url), FakeLambdaContext(int(remaining_s * 1000)))

    assert time.monotonic() - started < 3
    (answer,) = response_url.bodies()
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("StoreUnavailable")
    _slow_migration_left_nothing(database_url)
