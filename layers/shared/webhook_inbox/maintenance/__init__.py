"""Maintenance: the sweeper's run (:mod:`.sweeper`) and its jobs, one module per job, run in
order by :class:`webhook_inbox.maintenance.sweeper.Sweep`.

Each job is a step that sees only the run's :class:`~webhook_inbox.maintenance.context.SweepContext`
(connection, settings, clients, time budget, report), so a job can be read, changed and tested
without the others: :mod:`.lease_expiry`, :mod:`.reenqueue`, :mod:`.outbox_publishing` (through
:mod:`.outbox_drain` and :mod:`.publishers`), :mod:`.backlog_measurement`, :mod:`.retention`;
:mod:`.registry_check` judges the providers registry once a run (read once per five minutes);
:mod:`.report` and :mod:`.metrics` are what the run tells the operator.
"""

# No other stage imports maintenance (tests/unit/test_structure.py enforces it).
__all__: list[str] = []
