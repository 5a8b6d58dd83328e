"""Schema migrations on deploy: the CloudFormation custom resource behind ``DatabaseSchema``.

Create and Update apply every pending migration with the same runner as
``webhook-inbox migrate``; Delete does nothing (deleting the stack never drops your data).
CloudFormation is always answered, see :mod:`webhook_inbox.deploy.custom_resource`.

The run has a deadline a little before the custom resource's watchdog: every statement's
timeout ends by then, so the runner fails (and rolls back) by itself and CloudFormation hears
the real error. Should a statement still be running when the watchdog fires, the watchdog
cancels it first: FAILED is never answered while the migration's transaction could commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import psycopg

from webhook_inbox import aws
from webhook_inbox.deploy import custom_resource
from webhook_inbox.store import credentials, db
from webhook_inbox.store.migrate import Limits, applied_versions, migrate

logging.getLogger().setLevel(logging.INFO)
aws.use(aws.MIGRATIONS)

APPLICATION_PACKAGE = "webhook_inbox_app"
# Stable across updates, so an Update never makes CloudFormation "replace" the schema.
PHYSICAL_ID = "webhook-inbox-schema"
# The runner's deadline, this long before the watchdog fires: time to roll back and answer.
DEADLINE_MARGIN_S = 3.0


class MigrationRun:
    """One request's migration: its deadline and the connection the watchdog may cancel."""

    def __init__(self, context: Any) -> None:
        remaining_s = context.get_remaining_time_in_millis() / 1000.0
        self.deadline = (
            time.monotonic() + remaining_s - custom_resource.WATCHDOG_MARGIN_S - DEADLINE_MARGIN_S
        )
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def apply(self, properties: Mapping[str, Any]) -> dict[str, str]:
        conninfo = credentials.database_conninfo(db.settings())
        conn = db.connect(conninfo, application_name="webhook-inbox-migrations")
        with self._lock:
            self._conn = conn
        try:
            limits = Limits(deadline=self.deadline)
            # The runtime's tables first, then the application's (ApplicationLayer).
            applied_now = migrate(conn, limits) + migrate(conn, limits, package=APPLICATION_PACKAGE)
            # The runtime's schema version: an application's versions (``<package>:NNNN``)
            # sort after the runtime's, but say nothing about the runtime's tables.
            runtime_versions = [v for v in applied_versions(conn) if ":" not in v]
            if "RoleStatementTimeoutMs" in properties:
                # The application's timeouts (not this function's long DDL ones) as the role's
                # defaults: behind RDS Proxy they cannot travel with the connection.
                db.set_role_timeouts(
                    conn,
                    statement_ms=int(properties["RoleStatementTimeoutMs"]),
                    lock_ms=int(properties["RoleLockTimeoutMs"]),
                )
                conn.commit()
        finally:
            with self._lock:
                self._conn = None
            conn.close()
        return {
            "AppliedNow": ",".join(applied_now),
            "SchemaVersion": runtime_versions[-1] if runtime_versions else "",
        }

    def cancel(self) -> None:
        """Ask the server to cancel the running statement (a transaction then rolls back)."""
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.cancel_safe(timeout=2.0)


def handler(event: dict[str, Any], context: Any) -> None:
    run = MigrationRun(context)
    custom_resource.run(
        event,
        context,
        on_create_or_update=run.apply,
        physical_id=PHYSICAL_ID,
        cancel=run.cancel,
    )
