"""``webhook-inbox providers add|list|show|rotate|remove|history|import``: the commands.

Secrets come from stdin (``--secret-stdin``) or a file (``--public-key-file``) and are never
printed, logged or put in the history: ``show`` and the history carry a fingerprint instead.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import json
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from webhook_inbox.settings import DEFAULT_PROVIDERS_MAX_AGE_S, DEFAULT_PROVIDERS_REFRESH_S
from webhook_inbox_tools.cli import render
from webhook_inbox_tools.cli.actions import confirm
from webhook_inbox_tools.cli.providers import edits, store
from webhook_inbox_tools.cli.providers.target import (
    AwsCallFailed,
    ProviderRefused,
    ProvidersError,
    Target,
    resolve_target,
)
from webhook_inbox_tools.cli.providers.traffic import traffic

# How soon a change is live on a deployed stack: ingest re-reads the registry every 30 s, and
# never accepts by a copy older than this (it answers 503 instead while it cannot re-read).
REFRESH_BOUND_S = int(DEFAULT_PROVIDERS_MAX_AGE_S)
Command = Callable[[argparse.Namespace], int]
COUNT_SOURCES = {
    "database": "the inbox database",
    "metrics": "the stack's CloudWatch metrics (the last delivery to 5 minutes)",
    "none": "nowhere",
}


def aws_errors(command: Command) -> Command:
    """A failed AWS call as one error line naming the action and AWS's code, not a traceback."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return command(args)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            action = f"{exc.operation_name}"
            raise AwsCallFailed(
                f"AWS refused {action}: {error.get('Code')}: {error.get('Message')} "
                "(the IAM needs of each command: docs/deploy.md)"
            ) from exc
        except BotoCoreError as exc:
            raise AwsCallFailed(f"cannot reach AWS: {exc}") from exc

    return run


def _pin(args: argparse.Namespace) -> str:
    """A pin: the certificate file's first PEM certificate and the URL it is published at."""
    from webhook_inbox.ingest.schemes import certificates

    if not args.certificate_url:
        raise ProvidersError("--pin-certificate needs --certificate-url (the URL the sender names)")
    try:
        text = Path(args.pin_certificate).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProvidersError(f"cannot read {args.pin_certificate}: {exc}") from None
    block = re.search(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", text, re.S)
    if block is None or "PRIVATE KEY" in text:
        raise ProvidersError(
            f"{args.pin_certificate} is not a PEM certificate (and must hold no private key)"
        )
    return certificates.pin_text(args.certificate_url, block[0])


def _private_jwk(text: str) -> bool:
    """Whether ``text`` is a JSON Web Key with private members (a development key: never one to
    pin in a deployed registry, where it would sit beside the public keys it signs for)."""
    try:
        document = json.loads(text)
    except ValueError:
        return False
    return isinstance(document, dict) and "d" in document


def _secret(args: argparse.Namespace) -> str | None:
    """The new secret: stdin without one trailing newline, the public key file's text, a
    pinned certificate, or none (``--no-secret``)."""
    if getattr(args, "no_secret", False):
        return None
    if args.pin_certificate:
        return _pin(args)
    if args.certificate_url:
        raise ProvidersError("--certificate-url goes with --pin-certificate")
    if args.public_key_file:
        try:
            text = Path(args.public_key_file).read_text("utf-8").strip()
        except OSError as exc:
            raise ProvidersError(f"cannot read {args.public_key_file}: {exc.strerror}") from None
        if _private_jwk(text):
            raise ProvidersError(
                f"{args.public_key_file} is a private JSON Web Key ('d'): pin the public key the "
                "sender publishes"
            )
    elif sys.stdin.isatty():
        # Typed at a terminal: read without echo, as a password prompt does.
        text = getpass.getpass("secret (not echoed): ")
    else:
        text = sys.stdin.read()
        text = text[:-1] if text.endswith("\n") else text
        text = text[:-1] if text.endswith("\r") else text
    if not text:
        raise ProvidersError(
            "the secret is empty: paste it when asked, or pipe it in "
            '(printf %s "$SECRET" | … --secret-stdin)'
        )
    return text


def _report_write(target: Target, written: store.Written, what: str) -> None:
    # A running dev serves its providers file until the registry is written, and re-reads the
    # registry every second; a deployed stack serves its ProvidersConfig parameter.
    dev = bool(target.dev_env)
    served = "the providers file dev started with" if dev else "ProvidersConfig"
    if written.imported:
        count = len(written.document.providers or {})
        print(
            f"imported {served} first: the registry of {target.label} now manages the "
            f"providers ingest served ({count} after this change); {served} is ignored "
            "from now on"
        )
    print(what)
    if dev:
        print("live in the running dev within a second (it re-reads its registry every second)")
    else:
        print(
            f"live within {REFRESH_BOUND_S} seconds (ingest re-reads the registry every "
            f"{DEFAULT_PROVIDERS_REFRESH_S:.0f} s and accepts by no copy older than "
            f"{REFRESH_BOUND_S} s)"
        )
    if written.raced:
        print(
            "warning: someone else changed the registry between this command's read and its "
            "write; their change may have been replaced by this one. Check with "
            "`webhook-inbox providers history` and redo theirs if it is missing",
            file=sys.stderr,
        )


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"scheme": args.scheme}
    if args.tolerance_seconds is not None:
        settings["tolerance_seconds"] = args.tolerance_seconds
    if args.option:
        settings["options"] = dict(args.option)
    if args.public_url:
        settings["public_url"] = args.public_url
    return settings


@aws_errors
def cmd_add(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    secret = _secret(args)
    written = store.write(target, edits.add(args.name, _settings(args), secret))
    _report_write(target, written, f"added provider {args.name} ({args.scheme}) to {target.label}")
    return 0


@aws_errors
def cmd_rotate(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    secret = _secret(args)
    if secret is None:  # --no-secret is add's only
        raise ProvidersError("rotate needs a new secret, public key or pinned certificate")
    written = store.write(target, edits.rotate(args.name, secret, args.keep_old_for))
    kept = (
        f"the older secrets verify until {written.document.history[-1]['change']['old_expire_at']}"
        if args.keep_old_for > timedelta(0)
        else "the older secrets were dropped"
    )
    _report_write(
        target, written, f"rotated provider {args.name}: the new secret is first (it signs); {kept}"
    )
    return 0


@aws_errors
def cmd_remove(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    if not args.yes and not confirm(f"Remove provider {args.name} from {target.label}?"):
        print("aborted; nothing was changed", file=sys.stderr)
        return 1
    written = store.write(target, edits.remove(args.name))
    _report_write(
        target,
        written,
        f"removed provider {args.name}: its deliveries now get 404; its events stay in the inbox",
    )
    return 0


@aws_errors
def cmd_import(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    written = store.write(target, lambda p, now: (p, "", "", {}), import_only=True)
    names = sorted(written.document.providers or {})
    _report_write(
        target, written, f"the registry now holds {len(names)} provider(s): {', '.join(names)}"
    )
    return 0


def _served(target: Target, snapshot: store.Snapshot) -> tuple[dict[str, Any], str]:
    """The providers ingest serves now, and where they come from."""
    if snapshot.document.providers is None:
        return target.deployed_config(), "ProvidersConfig (the registry is not managed yet)"
    return snapshot.document.providers, "the providers registry"


def _ages(secrets: list[dict[str, Any]], now: datetime) -> str:
    parts = []
    for secret in secrets:
        added = secret.get("added_at")
        text = render.age(store.parse_iso(added), now=now) if added else "-"
        if secret.get("expires_at"):
            text += f" (expires in {render.age(now, now=store.parse_iso(secret['expires_at']))})"
        parts.append(text)
    return ", ".join(parts)


@aws_errors
def cmd_list(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    snapshot = store.read(target)
    providers, source = _served(target, snapshot)
    now = datetime.now(UTC)
    providers = store.prune_expired(providers, now)
    dead = set(store.without_live_secret(providers, now))
    report = traffic(args, target, sorted(providers))
    rows = []
    for name in sorted(providers):
        provider, counts = providers[name], report.of(name)
        rows.append(
            {
                "name": name,
                "scheme": provider.get("scheme"),
                "live_secret": name not in dead,
                "secrets": [edits.masked(s) for s in provider.get("secrets", [])],
                "accepted_24h": counts.accepted,
                "duplicates_24h": counts.duplicates,
                "rejected_24h": counts.rejected,
                "last_delivery_at": counts.last_delivery_at,
            }
        )
    if args.json:
        render.print_json(
            {
                "source": source,
                "counts_from": report.source,
                "providers": rows,
                "notes": report.notes + _dead_notes(dead),
            }
        )
        return 0
    print(f"{len(rows)} provider(s) of {target.label}, from {source}:")
    render.table(
        ("provider", "scheme", "secrets", "ages", "accepted", "duplicates", "rejected", "last"),
        [
            [
                r["name"],
                r["scheme"],
                len(r["secrets"]) if r["live_secret"] else "none live",
                _ages(providers[r["name"]].get("secrets", []), now),
                r["accepted_24h"],
                r["duplicates_24h"],
                r["rejected_24h"],
                r["last_delivery_at"],
            ]
            for r in rows
        ],
    )
    print(f"counts over the last 24 hours, from {COUNT_SOURCES[report.source]}")
    for note in report.notes + _dead_notes(dead):
        print(f"note: {note}", file=sys.stderr)
    return 0


def _dead_notes(names: set[str]) -> list[str]:
    return [
        f"provider {name} has no live secret (every one has expired): ingest refuses all its "
        f"deliveries (401). Put a new one in with `webhook-inbox providers rotate {name} "
        f"--secret-stdin`, or take it out with `webhook-inbox providers remove {name}`"
        for name in sorted(names)
    ]


@aws_errors
def cmd_show(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    providers, source = _served(target, store.read(target))
    if args.name not in providers:
        raise ProviderRefused(f"no provider {args.name!r} in {target.label} ({source})")
    shown = {"name": args.name, "source": source, **edits.masked_provider(providers[args.name])}
    if args.json:
        render.print_json(shown)
        return 0
    for key, value in shown.items():
        if key != "secrets":
            print(f"{key}: {json.dumps(value) if isinstance(value, dict) else value}")
    print("secrets (the first one signs):")
    render.table(
        ("kind", "where", "added", "expires"),
        [
            [
                s["kind"],
                s.get("fingerprint") or s.get("secret_arn") or s.get("env"),
                s.get("added_at"),
                s.get("expires_at"),
            ]
            for s in shown["secrets"]
        ],
    )
    return 0


@aws_errors
def cmd_history(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    entries = store.read(target).document.history
    if args.name:
        entries = [e for e in entries if e["provider"] == args.name]
    if args.json:
        render.print_json(entries)
        return 0
    if not entries:
        print("no changes recorded", file=sys.stderr)
        return 0
    render.table(
        ("at", "action", "provider", "by", "change"),
        [[e["at"], e["action"], e["provider"], e["by"], json.dumps(e["change"])] for e in entries],
    )
    return 0
