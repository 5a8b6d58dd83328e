"""Schema migrations on deploy: the CloudFormation custom resource behind ``DatabaseSchema``.

Create and Update apply every pending migration with the same runner as
``webhook-inbox migrate``; Delete does nothing (deleting the stack never drops your data).
CloudFormation is always answered, see :mod:`webhook_inbox.custom_resource`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from webhook_inbox import custom_resource, db
from webhook_inbox.migrate import applied_versions, migrate

logging.getLogger().setLevel(logging.INFO)

APPLICATION_PACKAGE = "webhook_inbox_app"
# Stable across updates, so an Update never makes CloudFormation "replace" the schema.
PHYSICAL_ID = "webhook-inbox-schema"


def apply_migrations(properties: Mapping[str, Any]) -> dict[str, str]:
    conn = db.connect(db.database_conninfo(), application_name="webhook-inbox-migrations")
    try:
        # The runtime's tables first, then the application's (ApplicationLayer).
        applied_now = migrate(conn) + migrate(conn, package=APPLICATION_PACKAGE)
        current = applied_versions(conn)
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
        conn.close()
    return {
        "AppliedNow": ",".join(applied_now),
        "SchemaVersion": current[-1] if current else "",
    }


def handler(event: dict[str, Any], context: Any) -> None:
    custom_resource.run(
        event, context, on_create_or_update=apply_migrations, physical_id=PHYSICAL_ID
    )
