"""``webhook-inbox providers``: add, rotate and remove a sender on a running stack, no deploy.

The stack keeps its providers in one Secrets Manager secret (encrypted with the stack's key,
named by the stack output ``ProvidersRegistryArn``) that ingest re-reads within a minute. These
commands read it, change it, validate the whole new document and write it back, recording who
did what (never a secret) in the document's history. Without ``--stack`` they act on the
``webhook-inbox dev`` running in this folder, whose moto holds the same registry.

The modules: target (which registry, and the AWS clients), store (read, validate, write, audit),
edits (the add/rotate/remove changes and secret masking), traffic (the counts ``list`` shows),
commands (the command functions).
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import timedelta
from typing import Any

from webhook_inbox_tools.cli.params import positive_int, provider_name
from webhook_inbox_tools.cli.providers import commands
from webhook_inbox_tools.cli.providers.target import add_target_options

_DURATION = re.compile(r"^(\d+)\s*([smhdw]?)$")
_UNITS = {"": "seconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def duration(text: str) -> timedelta:
    """A length of time: 24h, 30m, 7d, 90s, or 0."""
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (24h, 30m, 7d, 0)")
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


def option_pair(text: str) -> tuple[str, Any]:
    """KEY=VALUE; VALUE is JSON when it is a number, true/false, a list or an object."""
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        parsed = json.loads(value)
    except ValueError:
        return key, value
    return key, parsed if not isinstance(parsed, str) else value


def _secret_source(parser: argparse.ArgumentParser, *, adding: bool = False) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--secret-stdin",
        action="store_true",
        help="read the signing secret from stdin (one trailing newline is dropped; at a terminal "
        "it is asked for without echo)",
    )
    source.add_argument(
        "--public-key-file",
        metavar="FILE",
        help="read the provider's public key from FILE (public-key schemes: discord, sendgrid; "
        "a JSON Web Key for google-pubsub and plaid)",
    )
    source.add_argument(
        "--pin-certificate",
        metavar="FILE",
        help="pin the sender's PEM certificate in FILE, published at --certificate-url "
        "(certificate schemes: sns, paypal)",
    )
    if adding:
        source.add_argument(
            "--no-secret",
            action="store_true",
            help="no secret: a certificate scheme that downloads its sender's certificates, "
            "google-pubsub downloading Google's keys, app-store (Apple's root is embedded)",
        )
    parser.add_argument(
        "--certificate-url",
        metavar="URL",
        help="with --pin-certificate: the URL the sender names the certificate by "
        "(SigningCertURL, PAYPAL-CERT-URL)",
    )


def _name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", metavar="NAME", type=provider_name, help="the provider's name (/webhooks/NAME)"
    )


def add_commands(sub: Any) -> None:
    providers = sub.add_parser(
        "providers",
        help="add, rotate and remove providers on a running stack (no deploy)",
        description="Manage the deployed stack's providers (--stack) or the running dev's: "
        "changes are live within 60 seconds, audited, and validated before anything is written.",
    )
    sub = providers.add_subparsers(dest="providers_command", required=True, metavar="COMMAND")
    target = argparse.ArgumentParser(add_help=False)
    add_target_options(target)

    p = sub.add_parser(
        "add",
        parents=[target],
        help="add a provider with its secret or public key",
        description="Add provider NAME with one secret (stdin), public key or pinned certificate "
        "(a file), or none (--no-secret: a certificate scheme that downloads them). Refused "
        "when NAME exists (use rotate) or the configuration would be invalid.",
    )
    _name(p)
    p.add_argument("--scheme", required=True, help="its signature scheme (stripe, github, …)")
    p.add_argument(
        "--tolerance-seconds", type=positive_int, help="timestamp tolerance (the scheme's default)"
    )
    p.add_argument(
        "--option",
        action="append",
        type=option_pair,
        default=[],
        metavar="KEY=VALUE",
        help="a scheme option (repeatable), e.g. signature_header=X-Acme-Signature",
    )
    p.add_argument("--public-url", metavar="URL", help="the URL the provider calls, if it signs it")
    _secret_source(p, adding=True)
    p.set_defaults(func=commands.cmd_add)

    p = sub.add_parser(
        "list",
        parents=[target],
        help="every provider: scheme, secrets and their ages, traffic over 24 h",
        description="Every provider with its scheme, its secrets' ages and expiry, and the "
        "accepted and duplicate deliveries of the last 24 hours and the last delivery's time "
        "(from the database when one is reachable, else the stack's CloudWatch metrics).",
    )
    p.add_argument(
        "--database-url",
        metavar="URL",
        help="the inbox database to count deliveries in (default: $DATABASE_URL, else the "
        "running dev's; without one, or out of reach: the stack's CloudWatch metrics)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=commands.cmd_list)

    p = sub.add_parser(
        "show",
        parents=[target],
        help="one provider's settings, secrets masked",
        description="One provider's settings; each secret as its kind, added and expiry times "
        "and a fingerprint (the first 8 hex digits of its SHA-256), never its value.",
    )
    _name(p)
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=commands.cmd_show)

    p = sub.add_parser(
        "rotate",
        parents=[target],
        help="put a new secret first and expire the old ones after an overlap",
        description="Make a new secret (stdin) or public key (a file) the provider's first, "
        "the one that signs; the older ones keep verifying for --keep-old-for, then ingest "
        "ignores them.",
    )
    _name(p)
    _secret_source(p)
    p.add_argument(
        "--keep-old-for",
        type=duration,
        default=timedelta(hours=24),
        metavar="DURATION",
        help="how long the older secrets keep verifying: 24h, 30m, 7d, 0 to drop them at once "
        "(default 24h)",
    )
    p.set_defaults(func=commands.cmd_rotate)

    p = sub.add_parser(
        "remove",
        parents=[target],
        help="remove a provider (its events stay in the inbox)",
        description="Remove provider NAME: its deliveries get 404 as an unknown provider's "
        "within 60 seconds; its events stay in the inbox.",
    )
    _name(p)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=commands.cmd_remove)

    p = sub.add_parser(
        "history",
        parents=[target],
        help="who changed which provider, when, and what changed",
        description="The registry's audit entries, oldest first (the last 100): when, the "
        "caller's identity ARN, the action and what changed, never a secret.",
    )
    p.add_argument("name", metavar="NAME", nargs="?", help="only this provider's entries")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.set_defaults(func=commands.cmd_history)

    p = sub.add_parser(
        "import",
        parents=[target],
        help="take over the providers of ProvidersConfig (a one-time migration)",
        description="Copy the stack's ProvidersConfig providers into the registry, which then "
        "manages them (ProvidersConfig is ignored from then on). The first add, rotate or "
        "remove does the same by itself.",
    )
    p.set_defaults(func=commands.cmd_import)
