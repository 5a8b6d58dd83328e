"""``webhook-inbox check-handlers``: every registered handler, run through the real processor on
a throwaway database under adversarial schedules (:mod:`.properties`), PASS or FAIL per property
with the rows that differ.

Each handler is checked with a sample of its event type (tools/webhook_inbox_tools/samples/, by
its provider's scheme) or a payload of the user's (``--payload``); the field that carries the
version comes from the sample or ``--version-field``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import bodies, providers
from webhook_inbox_tools import sample_events
from webhook_inbox_tools.handler_lab.keys import check_keys

if TYPE_CHECKING:
    from webhook_inbox_tools.handler_lab.properties import Case, Verdict

# The lab and the properties import the processor, whose logger is made at import: only when the
# command runs, never at the CLI's start (a `dev` forks its functions from that process).

DEFAULT_HANDLERS = "webhook_inbox_app.handlers:HANDLERS"
DEFAULT_APPLICATION = "webhook_inbox_app"
SAMPLE_PROVIDERS = Path("events/providers.local.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--handlers",
        default=DEFAULT_HANDLERS,
        metavar="MODULE:NAME",
        help=f"the handlers map to check (default {DEFAULT_HANDLERS})",
    )
    parser.add_argument(
        "--application",
        default=DEFAULT_APPLICATION,
        metavar="PACKAGE",
        help=f"the package whose migrations/ make the handlers' tables (default "
        f"{DEFAULT_APPLICATION})",
    )
    parser.add_argument(
        "--providers",
        metavar="FILE",
        help="the providers file that says each provider's scheme (default: providers.json "
        f"here if it exists, else {SAMPLE_PROVIDERS})",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="PROVIDER:TYPE",
        help="check only this handler (repeatable)",
    )
    parser.add_argument(
        "--payload",
        action="append",
        default=[],
        metavar="PROVIDER:TYPE=FILE",
        help="check the handler with this JSON payload instead of the sample (repeatable)",
    )
    parser.add_argument(
        "--version-field",
        action="append",
        default=[],
        metavar="PROVIDER:TYPE=PATH",
        help="the payload field (dotted path) that orders two events about the same object",
    )
    parser.add_argument(
        "--server",
        default="",
        metavar="URL",
        help="a PostgreSQL server to create the throwaway databases on (a role that may create "
        "databases; default: an embedded PostgreSQL started for the run and removed after)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="a handler key that can never match (a provider not configured, a type its "
        "provider never sends) is a failure, not a warning",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def _keyed(values: Sequence[str], option: str) -> dict[tuple[str, str], str]:
    found = {}
    for value in values:
        key, separator, rest = value.partition("=")
        provider, colon, event_type = key.partition(":")
        if not (separator and colon and provider and event_type and rest):
            raise ConfigurationError(f"{option} takes PROVIDER:TYPE=VALUE, not {value!r}")
        found[(provider, event_type)] = rest
    return found


def providers_registry(path: str | None) -> providers.Registry:
    """The providers file given, else providers.json here, else the sample providers."""
    chosen = Path(path) if path else Path("providers.json")
    if not path and not chosen.is_file():
        chosen = SAMPLE_PROVIDERS
    try:
        text = chosen.read_text("utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the providers file {chosen}: {exc}") from None
    return providers.load_config_text(text, toml=chosen.suffix == ".toml")


def build_cases(
    args: argparse.Namespace, registry: providers.Registry
) -> tuple[list[Case], list[str]]:
    """The handlers to check, each with its event; and why any handler cannot be checked."""
    from webhook_inbox_tools.handler_lab.properties import Case, load_handlers

    handled = load_handlers(args.handlers)
    only = {tuple(o.split(":", 1)) for o in args.only}
    payloads = _keyed(args.payload, "--payload")
    versions = _keyed(args.version_field, "--version-field")
    cases, problems = [], []
    for provider_name, event_type in sorted(handled):
        key = (provider_name, event_type)
        if only and key not in only:
            continue
        provider = registry.get(provider_name)
        sample = _sample(provider, event_type) if provider else None
        if key in payloads:
            payload, event_id = _read_payload(payloads[key]), f"evt_check_{uuid.uuid4().hex[:12]}"
        elif sample is not None:
            payload, event_id = sample
        else:
            where = "is not in the providers file" if provider is None else "has no sample"
            problems.append(
                f"{provider_name} {event_type}: not checked: the provider {where}; give "
                f"--payload {provider_name}:{event_type}=FILE"
            )
            continue
        version = versions.get(key) or _sample_version(provider, event_type)
        cases.append(Case(provider_name, event_type, args.handlers, event_id, payload, version))
    return cases, problems


def _sample(provider: providers.Provider, event_type: str) -> tuple[Any, str] | None:
    if event_type not in sample_events.event_types(provider):
        return None
    built = sample_events.build(provider, event_type, now=int(time.time()))
    payload = bodies.parse(provider.scheme.body_format, built.body)
    if isinstance(payload, list):  # a batch sender: the first event of the batch
        payload = payload[0]
    return payload, built.event_id or f"evt_check_{uuid.uuid4().hex[:12]}"


def _sample_version(provider: providers.Provider | None, event_type: str) -> str | None:
    found = sample_events.catalog(provider.scheme.name) if provider else None
    sample = found.events.get(event_type) if found else None
    return sample.version if sample else None


def _read_payload(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"--payload {path}: {exc}") from None


def cmd_check_handlers(args: argparse.Namespace) -> int:
    from webhook_inbox_tools.handler_lab import properties
    from webhook_inbox_tools.handler_lab.lab import Lab

    registry = providers_registry(args.providers)
    key_problems = check_keys(properties.load_handlers(args.handlers), registry)
    warnings = [str(p) for p in key_problems if p.warning]
    for problem in key_problems:
        kind = ("error" if args.strict else "warning") if problem.warning else "note"
        print(f"{kind}: {problem}", file=sys.stderr)
    cases, problems = build_cases(args, registry)
    if not cases and not problems:
        print("no handlers registered: nothing to check", file=sys.stderr)
        return 1 if (args.strict and warnings) else 0
    started = time.monotonic()
    results: dict[tuple[str, str], list[Verdict]] = {}
    with Lab(args.application, args.server) as lab:
        for index, case in enumerate(cases, 1):
            print(
                f"[{index}/{len(cases)}] checking {case.provider} {case.event_type}",
                file=sys.stderr,
            )
            results[(case.provider, case.event_type)] = properties.check(lab, case)
    elapsed = time.monotonic() - started
    failed = any(v.status == "FAIL" for verdicts in results.values() for v in verdicts)
    if args.json:
        _print_json(results, problems, elapsed, warnings)
    else:
        _print_text(results, problems, elapsed)
    return 1 if failed or (args.strict and warnings) else 0


def _print_json(
    results: Mapping[tuple[str, str], list[Verdict]],
    problems: list[str],
    elapsed: float,
    warnings: list[str],
) -> None:
    document = {
        "handlers": [
            {"provider": p, "event_type": t, "properties": [v.as_json() for v in verdicts]}
            for (p, t), verdicts in results.items()
        ],
        "not_checked": problems,
        "key_warnings": warnings,
        "seconds": round(elapsed, 2),
    }
    print(json.dumps(document, indent=2))


def _print_text(
    results: Mapping[tuple[str, str], list[Verdict]], problems: list[str], elapsed: float
) -> None:
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for (provider, event_type), verdicts in results.items():
        print(f"{provider} {event_type}")
        for verdict in verdicts:
            counts[verdict.status] += 1
            print(f"  {verdict.status}  {verdict.property:<17} {verdict.schedule}")
            for line in verdict.differences:
                print(f"        {line}")
    for problem in problems:
        print(f"note: {problem}", file=sys.stderr)
    print(
        f"{len(results)} handler(s): {counts['PASS']} passed, {counts['FAIL']} failed, "
        f"{counts['SKIP']} skipped in {elapsed:.1f} s"
    )
