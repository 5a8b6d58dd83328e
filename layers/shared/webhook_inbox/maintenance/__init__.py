"""The sweeper's maintenance jobs, one module per job, run in order by
:class:`webhook_inbox.sweeper.Sweep`.

Each job is a step that sees only the run's :class:`~webhook_inbox.maintenance.context.SweepContext`
(connection, settings, clients, time budget, report), so a job can be read, changed and tested
without the others: :mod:`.lease_expiry`, :mod:`.reenqueue`, :mod:`.outbox_publishing`,
:mod:`.backlog_measurement`, :mod:`.retention`; :mod:`.report` and :mod:`.metrics` are what the
run tells the operator.
"""
