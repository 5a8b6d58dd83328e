"""The ``webhook-inbox`` command line (console script ``webhook_inbox_tools.cli:main``).

Modules: ``app`` (parser, exit codes), ``render`` (tables, JSON, colours), ``params`` (argument
types), ``database`` (the operator's connection), ``inspect_events`` and ``actions`` (the commands).
"""

from webhook_inbox_tools.cli.app import main

__all__ = ["main"]
