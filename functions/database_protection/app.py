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

# Stable across updates (a replaced instance only changes the properties).
PHYSICAL_ID = "webhook-inbox-database-protection"
# Time for RDS to accept the change, inside the function's 120 s timeout and the watchdog.
WAIT_S = 90.0


def protect(properties: Mapping[str, Any]) -> dict[str, str]:
    instance_id = str(properties["DBInstanceIdentifier"])
    database_protection.set_protection(aws.client("rds"), instance_id, on=True, wait_s=WAIT_S)
    return {"Protected": instance_id}


def release_on_rollback(properties: Mapping[str, Any]) -> dict[str, str]:
    released = database_protection.release_if_create_rolls_back(
        aws.client("rds"),
        aws.client("cloudformation"),
        str(properties["DBInstanceIdentifier"]),
        str(properties["StackId"]),
        wait_s=WAIT_S,
    )
    return {"Released": "true" if released else "false"}


def reapply(target: Mapping[str, Any]) -> str:
    """The schedule's run; a re-applied protection is a warning (someone switched it off)."""
    instance_id = str(target["DBInstanceIdentifier"])
    found = database_protection.reapply(
        aws.client("rds"), aws.client("cloudformation"), instance_id, str(target["StackId"])
    )
    if found == "reapplied":
        logger.warning("deletion protection re-applied to %s", instance_id)
    else:
        logger.info("deletion protection of %s checked: %s", instance_id, found)
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
