"""Log groups an AWS service creates for itself, brought under the stack's key and retention.

RDS exports a database's logs to ``/aws/rds/instance/<instance>/<log>``, creating each group the
first time it writes, unencrypted by the stack's key and never expiring. The group's name holds
the instance's identifier, which CloudFormation generates (naming the instance would replace
every deployed database), so the stack cannot create the groups before RDS does: it adopts them
once the instance exists. A group RDS has not created yet is created here, with the key; one it
has is associated with the key (what RDS wrote before stays under CloudWatch Logs' own
encryption) and given the retention. Running again changes nothing but the retention. Without a
stack key (``EncryptionKey=aws-managed``: an empty ARN) the groups keep CloudWatch Logs' own
encryption and only get the retention.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def adopt(logs: Any, names: Iterable[str], *, kms_key_arn: str, retention_days: int) -> list[str]:
    """Give every named group the key (none if ``kms_key_arn`` is empty) and the retention,
    creating the ones that are missing; return the names done. ``logs`` is a CloudWatch Logs
    client."""
    key = {"kmsKeyId": kms_key_arn} if kms_key_arn else {}
    done = []
    for name in names:
        try:
            logs.create_log_group(logGroupName=name, **key)
        except logs.exceptions.ResourceAlreadyExistsException:
            if kms_key_arn:
                logs.associate_kms_key(logGroupName=name, kmsKeyId=kms_key_arn)
        logs.put_retention_policy(logGroupName=name, retentionInDays=retention_days)
        done.append(name)
    return done
