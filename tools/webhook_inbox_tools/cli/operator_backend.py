"""Where an operator command (status, events list/show, replay, outbox list/retry) runs.

- ``--stack STACK``: through the deployed stack's operator function, its Function URLs read from
  the stack's outputs and called with your AWS credentials (:mod:`.operator_remote`). No network
  path to the database is needed; the audit records the AWS principal that signed the request.
- ``--database-url``, ``DATABASE_URL`` or ``DATABASE_SECRET_ARN``: this machine connects to the
  database itself and runs the same code the function runs (``webhook_inbox.operations``);
  ``--operator`` (else ``$USER``) is who acts.
- Neither, and a ``webhook-inbox dev`` running in this folder: through dev's operator function on
  its gateway, as the local user (``local:$USER``).

Either way the command gets a :class:`webhook_inbox.operations.commands.Answer` whose result is
plain JSON (timestamps as ISO 8601), rendered by one formatter (:mod:`.inspect_events`,
:mod:`.actions`).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from psycopg import Connection

from webhook_inbox import aws, config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.operations import commands, listings, requests
from webhook_inbox.settings import QueueSettings
from webhook_inbox.store import db
from webhook_inbox_tools.cli.database import HOW_TO_SET, open_connection
from webhook_inbox_tools.cli.params import operator_name
from webhook_inbox_tools.dev.env_file import running_dev_environment

_SQS_HOST = re.compile(r"^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
# A step of an action's progress: (done, total).
Progress = Callable[[int, int], None]


class UsageError(ConfigurationError):
    """The command line asks for something contradictory (exit code 2)."""


class Backend(Protocol):
    label: str  # where the command runs, for messages
    max_rows: int  # the largest page or selected set it serves
    operator: str | None  # who acts, when known before the call

    def call(self, body: dict[str, Any], *, progress: Progress | None = None) -> commands.Answer:
        """The answer to one request; errors raise (WebhookInboxError)."""

    def close(self) -> None: ...


def sqs_client_for(queue_url: str) -> Any:
    """An SQS client for the queue's region; a non-AWS URL (moto, LocalStack) is the endpoint."""
    host = urlsplit(queue_url).hostname or ""
    match = _SQS_HOST.match(host)
    if match:
        return aws.client("sqs", region_name=match[1])
    parts = urlsplit(queue_url)
    return aws.client(
        "sqs",
        endpoint_url=f"{parts.scheme}://{parts.netloc}",
        region_name=config.env("AWS_REGION") or config.env("AWS_DEFAULT_REGION") or "us-east-1",
    )


class LocalBackend:
    """The CLI on a database of its own: the operator function's code, in this process."""

    max_rows = listings.MAX_PAGE

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.label = "this database"
        explicit = getattr(args, "operator", None)
        self.operator = operator_name(explicit) if hasattr(args, "operator") else None
        self.queue_url = getattr(args, "queue_url", None) or config.current(QueueSettings).queue_url
        self._conn: Connection[Any] | None = None

    def call(self, body: dict[str, Any], *, progress: Progress | None = None) -> commands.Answer:
        request = requests.parse(body, max_rows=self.max_rows)
        if self._conn is None:
            self._conn = open_connection(self.args)
        caller = commands.Caller(self.operator or operator_name(None), requests.ACT)
        queue = None
        if self.queue_url:
            url = self.queue_url
            queue = commands.Queue(url, lambda: sqs_client_for(url))
        answer = commands.run(
            self._conn,
            request,
            caller,
            queue=queue,
            max_rows=self.max_rows,
            on_progress=progress,
        )
        # Exactly what the function would have sent: JSON, timestamps as text.
        return commands.Answer(
            json.loads(commands.encode(answer.result)), answer.messages, operator=answer.operator
        )

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def database_configured(args: argparse.Namespace) -> bool:
    configured = db.settings()
    return bool(getattr(args, "database_url", None) or configured.url or configured.secret_arn)


def backend_for(args: argparse.Namespace) -> Backend:
    """``--stack``, else a database of this machine's, else the dev running here."""
    from webhook_inbox_tools.cli import operator_remote

    stack = getattr(args, "stack", None)
    if getattr(args, "region", None) and not stack:
        raise UsageError("--region names the region of --stack: give both, or neither")
    if stack:
        _refuse_local_options(args, f"--stack {stack}", "the AWS principal that signed it")
        return operator_remote.RemoteBackend(operator_remote.stack_target(stack, args.region))
    if database_configured(args):
        return LocalBackend(args)
    dev_env = running_dev_environment()
    if dev_env.get(operator_remote.DEV_READ_URL):
        _refuse_local_options(args, "the webhook-inbox dev running here", "local:$USER")
        return operator_remote.RemoteBackend(operator_remote.dev_target(dev_env))
    raise ConfigurationError(
        f"no database configured: {HOW_TO_SET}; or pass --stack STACK to run it through a "
        "deployed stack's operator function, or run `webhook-inbox dev` in this folder"
    )


def _refuse_local_options(args: argparse.Namespace, where: str, who: str) -> None:
    if getattr(args, "operator", None):
        raise UsageError(
            f"--operator does not apply through {where}: the audit records the caller the "
            f"operator function authenticated ({who}), never a name the request gives"
        )
    if getattr(args, "queue_url", None):
        raise UsageError(
            f"--queue-url does not apply through {where}: its operator function sends to its "
            "own processing queue"
        )
