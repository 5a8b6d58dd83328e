"""RDS's export log groups under the stack's key and retention: the custom resource behind
``DatabaseLogGroups`` (see :mod:`webhook_inbox.deploy.log_groups` for why the stack adopts them).

Create and Update adopt the groups named in the properties; Delete leaves them (their retention
expires them). Runs outside the VPC: it calls only CloudWatch Logs and answers CloudFormation's
pre-signed S3 URL, and needs neither the database nor an endpoint. CloudFormation is always
answered (:mod:`webhook_inbox.deploy.custom_resource`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook_inbox import aws
from webhook_inbox.deploy import custom_resource, log_groups

aws.use(aws.LOG_GROUPS)

# Stable across updates (a database replaced under a new name only changes the properties).
PHYSICAL_ID = "webhook-inbox-database-log-groups"


def adopt(properties: Mapping[str, Any]) -> dict[str, str]:
    done = log_groups.adopt(
        aws.client("logs"),
        properties["LogGroupNames"],
        kms_key_arn=str(properties["KmsKeyArn"]),
        retention_days=int(properties["RetentionInDays"]),
    )
    return {"LogGroups": ",".join(done)}


def handler(event: dict[str, Any], context: Any) -> None:
    custom_resource.run(event, context, on_create_or_update=adopt, physical_id=PHYSICAL_ID)
