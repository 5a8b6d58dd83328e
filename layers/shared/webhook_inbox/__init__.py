"""webhook-inbox: an idempotent webhook consumer for AWS Lambda, SQS and PostgreSQL.

The package reads as the pipeline (docs/design.md, "Code map"): one folder per stage —
:mod:`~webhook_inbox.ingest`, :mod:`~webhook_inbox.processing`, :mod:`~webhook_inbox.maintenance`
— over :mod:`~webhook_inbox.store` (connections and the tables' data modules) and a small shared
base (the modules beside this file: settings, config, AWS clients, errors, observability,
deadlines, backoff, wake-ups); :mod:`~webhook_inbox.deploy` holds the deploy-time custom
resources. Each function's entry point imports its own stage, the store and the base; a stage
imports another only through the modules that stage lists in its ``__all__``.
"""

__version__ = "0.1.0"
