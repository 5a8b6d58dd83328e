"""The sweeper's summary line says only what happened: every run writes it, and bytes cost."""

from __future__ import annotations

from webhook_inbox.maintenance.report import SweepReport

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
