"""The custom resource behind ``IdleLedgerCleanup``: on Delete, empties the idle ledger's
bucket (:mod:`webhook_inbox.deploy.idle_ledger_cleanup`) so that CloudFormation can delete it.

Create and Update do nothing. Runs outside the VPC: it calls only S3 and answers
CloudFormation's pre-signed S3 URL. CloudFormation is always answered
(:mod:`webhook_inbox.deploy.custom_resource`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook_inbox import aws
from webhook_inbox.deploy import custom_resource, idle_ledger_cleanup

aws.use(aws.LEDGER_CLEANUP)

PHYSICAL_ID = "webhook-inbox-idle-ledger-cleanup"


def nothing(properties: Mapping[str, Any]) -> None:
    return None


def empty(properties: Mapping[str, Any]) -> dict[str, str]:
    keys = [str(key) for key in properties["Keys"]]
    calls = idle_ledger_cleanup.empty(aws.client("s3"), str(properties["BucketName"]), keys)
    return {"Deletes": str(calls)}


def handler(event: dict[str, Any], context: Any) -> None:
    custom_resource.run(
        event, context, on_create_or_update=nothing, on_delete=empty, physical_id=PHYSICAL_ID
    )
