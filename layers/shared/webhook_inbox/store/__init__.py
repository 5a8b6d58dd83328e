"""The store: the process's database connection and credentials, one data module per table
(:mod:`.inbox`, :mod:`.outbox`, :mod:`.pauses`, :mod:`.pacing`, each running the named
statements of its file in ``sql/``; :mod:`.inbox_upkeep`, the sweeper's part of the inbox;
:mod:`.partitions` and :mod:`.partition_switch` for the layout of the inbox and the outbox), the one
mapping of psycopg's errors (:mod:`.store_errors`), the backlog counts and the migrations.
Every stage uses it; it uses only the shared base."""

# What the stages and entry points may import (tests/unit/test_structure.py enforces it).
__all__ = [
    "backlog_metrics",
    "credentials",
    "db",
    "inbox",
    "inbox_upkeep",
    "migrate",
    "outbox",
    "pacing",
    "partition_switch",
    "partitions",
    "pauses",
    "queries",
    "store_errors",
]
