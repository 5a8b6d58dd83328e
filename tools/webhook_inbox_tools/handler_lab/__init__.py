"""Proving an application's handlers: a throwaway PostgreSQL with the runtime's and the
application's migrations (:mod:`.lab`), the adversarial schedules ``check-handlers`` runs
(:mod:`.properties`, :mod:`.check`). Installed with the tools, never in a Lambda layer."""
