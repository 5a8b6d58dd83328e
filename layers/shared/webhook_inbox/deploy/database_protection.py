"""Deletion protection for the database the stack creates, on only once the stack is whole.

A database created with deletion protection on cannot be deleted by the rollback of a failed
first create: the stack ends in ``ROLLBACK_FAILED`` with an empty database and everything it
depends on left behind. So the instance is created unprotected (its ``DeletionPolicy`` and
``UpdateReplacePolicy`` still take a final snapshot), and the ``DatabaseProtection`` custom
resource, which CloudFormation creates after every other resource, switches protection on.

Delete leaves protection on, so ``sam delete`` of a healthy stack (or an update that would
remove or replace the instance) stops at the database, as before. The one exception is the
rollback of a failed create (stack status ``ROLLBACK_IN_PROGRESS``): the protection this
resource switched on is switched off again, so the rollback can delete the instance with its
final snapshot and end in ``ROLLBACK_COMPLETE``.

With Aurora the protection is the cluster's (``ModifyDBCluster``): its instances have none of
their own, and the cluster's ``DeletionPolicy`` takes the final snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# The only stack status in which Delete releases the database: a first create rolling back.
# (UPDATE_ROLLBACK_IN_PROGRESS rolls back an update of a stack that was healthy before.)
CREATE_ROLLING_BACK = "ROLLBACK_IN_PROGRESS"
# ModifyDBInstance refuses while the instance is busy (a backup just after it was created, a
# modification CloudFormation started): retry this often, within the caller's time.
RETRY_EVERY_S = 10.0


def set_protection(
    rds: Any,
    database_id: str,
    *,
    on: bool,
    wait_s: float,
    cluster: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Switch the instance's (``cluster``: the Aurora cluster's) deletion protection (it
    applies at once), retrying while RDS says it is in a state that cannot be modified, for at
    most ``wait_s`` seconds."""
    deadline = clock() + wait_s
    while True:
        try:
            if cluster:
                rds.modify_db_cluster(
                    DBClusterIdentifier=database_id, DeletionProtection=on, ApplyImmediately=True
                )
            else:
                rds.modify_db_instance(
                    DBInstanceIdentifier=database_id, DeletionProtection=on, ApplyImmediately=True
                )
            return
        except (
            rds.exceptions.InvalidDBInstanceStateFault,
            rds.exceptions.InvalidDBClusterStateFault,
        ):
            if clock() + RETRY_EVERY_S > deadline:
                raise
            sleep(RETRY_EVERY_S)


def stack_status(cloudformation: Any, stack_id: str) -> str:
    stacks = cloudformation.describe_stacks(StackName=stack_id)["Stacks"]
    return str(stacks[0]["StackStatus"])


def release_if_create_rolls_back(
    rds: Any,
    cloudformation: Any,
    database_id: str,
    stack_id: str,
    *,
    wait_s: float,
    cluster: bool = False,
) -> bool:
    """On Delete: switch protection off only while a failed first create rolls back; return
    whether it did. A database already gone needs nothing."""
    if stack_status(cloudformation, stack_id) != CREATE_ROLLING_BACK:
        return False
    try:
        set_protection(rds, database_id, on=False, wait_s=wait_s, cluster=cluster)
    except (rds.exceptions.DBInstanceNotFoundFault, rds.exceptions.DBClusterNotFoundFault):
        return False
    return True
