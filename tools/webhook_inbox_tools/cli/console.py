"""``webhook-inbox console``: a web page over the operator commands, on this machine only.

It serves on 127.0.0.1 (a free port unless ``--port`` names one), prints a URL holding a one-time
token and opens it in the browser (not with ``--no-browser``). The pages run the same operator
commands the CLI runs, through the same backend (:mod:`.operator_backend`): the
``webhook-inbox dev`` running in this folder by default, a deployed stack's operator function
with ``--stack``. Nothing is stored; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import errno
import webbrowser
from contextlib import closing
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.cli.operator_backend import Backend, backend_for
from webhook_inbox_tools.console import rejections


def add_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "console",
        parents=parents,
        help="a web console on this machine over dev or a deployed stack (--stack)",
        description="Serve a web console on 127.0.0.1: find events, see their attempts and "
        "audit trail, replay them, retry outbox messages, pause and resume, watch the backlog. "
        "It runs the operator commands through the webhook-inbox dev running here, or a "
        "deployed stack's operator function with --stack (your AWS credentials decide what you "
        "may see and do). The printed URL holds a one-time token; keep it to yourself.",
    )
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="the port to listen on (default 0: any free port)",
    )
    p.add_argument(
        "--no-browser", action="store_true", help="print the URL without opening a browser"
    )
    p.set_defaults(func=cmd_console)


def _refusals(args: argparse.Namespace, backend: Backend) -> rejections.Source:
    """Where the health page counts refused deliveries: the stack's metrics with --stack, else
    the database of the dev running here (or the one configured), which may keep them."""
    from webhook_inbox.store import db
    from webhook_inbox_tools.dev.env_file import running_dev_environment

    if args.stack:
        from webhook_inbox_tools.cli.operator_remote import stack_target

        return rejections.from_stack_metrics(
            args.stack, stack_target(args.stack, args.region).region
        )
    url = (
        getattr(args, "database_url", None)
        or db.settings().url
        or running_dev_environment().get("DATABASE_URL")
    )
    return rejections.from_dev_database(url) if url else rejections.nowhere


def cmd_console(args: argparse.Namespace) -> int:
    from webhook_inbox_tools.console.pages import Pages
    from webhook_inbox_tools.console.server import ConsoleServer

    if not 0 <= args.port <= 65535:
        raise ConfigurationError(f"--port {args.port}: a port is 0 to 65535 (0: any free one)")
    with closing(backend_for(args)) as backend:
        try:
            server = ConsoleServer(Pages(backend, refused=_refusals(args, backend)), args.port)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigurationError(
                    f"port {args.port} is in use on 127.0.0.1: choose another, or --port 0"
                ) from None
            raise ConfigurationError(f"cannot listen on 127.0.0.1:{args.port}: {exc}") from None
        url = server.gate.url("/events")
        print(f"console | over {backend.label}", flush=True)
        print(f"console | open {url}", flush=True)
        print(
            "console | the URL holds a one-time token: keep it to yourself; Ctrl-C stops",
            flush=True,
        )
        if not args.no_browser:
            webbrowser.open(url)
        try:
            server.serve_forever()
        finally:
            server.server_close()
    return 0
