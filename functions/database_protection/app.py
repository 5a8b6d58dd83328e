"""Deletion protection for the created database: the custom resource behind
``DatabaseProtection`` (see :mod:`webhook_inbox.deploy.database_protection` for why it is
switched on last, and off again only while a failed first create rolls back).

Create and Update switch protection on; Delete releases it only during a create's rollback.
CloudFormation is always answered (:mod:`webhook_inbox.deploy.custom_resource`). The schedule's
event (``{"reapply": {...}}``, an EventBridge rule's constant input) switches protection back
on when someone switched it off while the stack is at rest. Runs outside the VPC: it calls RDS
and CloudFormation and answers CloudFormation's pre-signed S3 URL, never the database itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from webhook_inbox import aws
from webhook_inbox.deploy import custom_resource, database_protection

aws.use(aws.PROTECTION)
# The standard library's, as custom_resource's: Lambda's JSON log format writes its records.
logger = logging.getLogger(__name__)
logger.setLevel(logging.INFO)

# Stable across updates (a replaced database only changes the properties).
PHYSICAL_ID = "webhook-inbox-database-protection"
# Time for RDS to accept the change, inside the function's 120 s timeout and the watchdog.
WAIT_S = 90.0


def target(properties: Mapping[str, Any]) -> tuple[str, bool]:
    """(identifier, whether it is an Aurora cluster): the template names exactly one."""
    if "DBClusterIdentifier" in properties:
        return str(properties["DBClusterIdentifier"]), True
    return str(properties["DBInstanceIdentifier"]), False


def protect(properties: Mapping[str, Any]) -> dict[str, str]:
    database_id, cluster = target(properties)
    database_protection.set_protection(
        aws.client("rds"), database_id, on=True, wait_s=WAIT_S, cluster=cluster
    )
    return {"Protected": database_id}


def release_on_rollback(properties: Mapping[str, Any]) -> dict[str, str]:
    database_id, cluster = target(properties)
    released = database_protection.release_if_create_rolls_back(
        aws.client("rds"),
        aws.client("cloudformation"),
        database_id,
        str(properties["StackId"]),
        wait_s=WAIT_S,
        cluster=cluster,
    )
    return {"Released": "true" if released else "false"}


def reapply(target: Mapping[str, Any]) -> str:
    """The schedule's run; a re-applied protection is a warning (someone switched it off)."""
    cluster = "DBClusterIdentifier" in target  # Aurora: the cluster's protection
    database_id = str(target["DBClusterIdentifier" if cluster else "DBInstanceIdentifier"])
    found = database_protection.reapply(
        aws.client("rds"),
        aws.client("cloudformation"),
        database_id,
        str(target["StackId"]),
        cluster=cluster,
    )
    if found == "reapplied":
        logger.warning("deletion protection re-applied to %s", database_id)
    else:
        logger.info("deletion protection of %s checked: %s", database_id, found)
    return found


def handler(event: dict[str, Any], context: Any) -> dict[str, str] | None:
    if "reapply" in event:  # the schedule's, never CloudFormation's (those carry RequestType)
        return {"found": reapply(event["reapply"])}
    custom_resource.run(
        event,
        context,
        on_create_or_update=protect,
        on_delete=release_on_rollback,
        physical_id=PHYSICAL_ID,
    )
    return None
