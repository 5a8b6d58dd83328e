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

Protection switched off by hand (a console click, a script) would otherwise stay off until the
next deploy that changes the instance. So the same function also runs on a schedule
(:func:`reapply`): while the stack is at rest in a complete state, it switches protection back
on. Never while the stack is being created, updated, rolled back or deleted: ``sam delete``
removes that schedule before it reaches the database, and a deliberate delete (the RUNBOOK's
steps) switches protection off only after that.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# The only stack status in which Delete releases the database: a first create rolling back.
# (UPDATE_ROLLBACK_IN_PROGRESS rolls back an update of a stack that was healthy before.)
CREATE_ROLLING_BACK = "ROLLBACK_IN_PROGRESS"
# The stack statuses in which the schedule may switch protection back on: the stack at rest,
# DatabaseProtection created (a first create's CREATE_COMPLETE comes after it) and nothing of
# CloudFormation's under way. Any other (in progress, failed, deleting) leaves the instance be.
AT_REST = frozenset(
    {
        "CREATE_COMPLETE",
        "UPDATE_COMPLETE",
        "UPDATE_ROLLBACK_COMPLETE",
        "IMPORT_COMPLETE",
        "IMPORT_ROLLBACK_COMPLETE",
    }
)
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


def reapply(
    rds: Any, cloudformation: Any, database_id: str, stack_id: str, *, cluster: bool = False
) -> str:
    """The schedule's run: switch protection back on if it is off and the stack is at rest.
    Returns what it found: ``protected`` (nothing to do), ``not at rest: <status>`` (left
    alone), ``reapplied``, or ``gone`` (no such database). One describe call when protected.
    A busy database (InvalidDBInstanceState, InvalidDBClusterStateFault) raises: the next run
    tries again. ``cluster``: ``database_id`` names an Aurora cluster, whose protection it is."""
    try:
        if cluster:
            (found,) = rds.describe_db_clusters(DBClusterIdentifier=database_id)["DBClusters"]
        else:
            (found,) = rds.describe_db_instances(DBInstanceIdentifier=database_id)["DBInstances"]
    except (rds.exceptions.DBInstanceNotFoundFault, rds.exceptions.DBClusterNotFoundFault):
        return "gone"
    if found.get("DeletionProtection"):
        return "protected"
    status = stack_status(cloudformation, stack_id)
    if status not in AT_REST:
        return f"not at rest: {status}"
    set_protection(rds, database_id, on=True, wait_s=0, cluster=cluster)
    return "reapplied"
