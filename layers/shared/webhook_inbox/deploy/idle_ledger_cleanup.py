"""Emptying the idle ledger's bucket when the stack is deleted, so that ``sam delete`` stays one
command: CloudFormation deletes only an empty bucket.

The ledger holds two objects whose keys are fixed (:mod:`webhook_inbox.idle_ledger`); the
template names them once for the role (which may delete exactly those and list nothing) and
for this resource's properties (a test checks both against the code's keys). The functions
that write them depend on the custom resource and are deleted before it; an invocation
already running when its function was deleted can still write once, up to its timeout later.
Hence two passes: one at once, one after the longest writer's timeout. An object the stack
never wrote (someone else's) is left, and CloudFormation's delete of the bucket then says so
(docs/deploy.md, "Deleting the stack").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

# The longest a writer's invocation lasts (the act-level operator's 60 s timeout), rounded up.
WRITER_GRACE_S = 65.0
# The wait, as a module attribute so that tests can stand in for it.
sleep: Callable[[float], None] = time.sleep


def empty(s3: Any, bucket: str, keys: Sequence[str]) -> int:
    """Delete ``keys``, wait :data:`WRITER_GRACE_S`, delete them again; the number of delete
    calls made. A bucket that is already gone counts as empty. ``s3`` is an S3 client."""
    calls = _delete_keys(s3, bucket, keys)
    if calls == 0:
        return 0  # no bucket: nothing can be written to it either
    # A bounded wait, not a poll: nothing tells when a deleted function's last invocation ends.
    sleep(WRITER_GRACE_S)
    return calls + _delete_keys(s3, bucket, keys)


def _delete_keys(s3: Any, bucket: str, keys: Sequence[str]) -> int:
    from botocore.exceptions import ClientError

    done = 0
    for key in keys:
        try:
            # Deleting a key that does not exist succeeds: the pass is safe to repeat.
            s3.delete_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                return 0
            raise
        done += 1
    return done
