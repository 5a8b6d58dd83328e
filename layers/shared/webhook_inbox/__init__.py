"""webhook-inbox: an idempotent webhook consumer for AWS Lambda, SQS and PostgreSQL."""

__version__ = "0.1.0"
