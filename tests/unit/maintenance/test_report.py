"""The sweeper's summary line says only what happened: every run writes it, and bytes cost."""

from __future__ import annotations

from webhook_inbox.maintenance import idle
from webhook_inbox.maintenance.report import SweepReport
from webhook_inbox.store.backlog_metrics import Backlog

PARTITION_FIELDS = {
    "partitions_created",
    "partitions_dropped",
    "partitions_kept",
    "partitions_switched",
}


def test_a_run_that_changed_no_partition_logs_no_partition_fields() -> None:
    assert PARTITION_FIELDS.isdisjoint(SweepReport().as_log())


def test_each_partition_change_is_logged() -> None:
    report = SweepReport(partitions_created=2, partitions_kept=1, partitions_switched=True)
    fields = report.as_log()
    assert (fields["partitions_created"], fields["partitions_kept"]) == (2, 1)
    assert fields["partitions_switched"] is True
    assert "partitions_dropped" not in fields


def test_a_run_that_made_the_switch_is_not_quiet() -> None:
    # A quiet run lets the idle ledger keep later runs away from the database: one that made
    # the switch has the next run look again (for the partitions ahead it did not create).
    backlog = Backlog(
        event_counts={},
        oldest_unprocessed_age_seconds=0.0,
        outbox_pending=0,
        outbox_dead=0,
        oldest_outbox_age_seconds=0.0,
    )
    assert idle.was_quiet(SweepReport(backlog=backlog))
    assert not idle.was_quiet(SweepReport(backlog=backlog, partitions_switched=True))
    for done in ("partitions_created", "partitions_dropped", "partitions_kept"):
        assert idle.was_quiet(SweepReport(backlog=backlog, **{done: 1}))
