"""Your application: the domain handlers the processor runs and the tables they write.

Add a handler in :mod:`webhook_inbox_app.handlers` (one line per provider and event type), its
SQL in ``sql/`` and its tables as numbered migrations in ``migrations/`` (applied after the
runtime's own). Nothing here is part of the runtime package: this folder ships in its own
Lambda layer (``ApplicationLayer``) to the functions that run it (processor, migrations).
"""
