"""`trigger`: send a freshly signed, realistic delivery of a chosen event type, once or as load.

The body comes from the sample files (:mod:`webhook_inbox_tools.sample_events`), signed as
``sign`` signs it; it goes to the `webhook-inbox dev` running from this folder (its env file
names the URL and the providers it serves) or to ``--url``.
"""

from __future__ import annotations

import argparse
import http
import json
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from webhook_inbox import config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import providers
from webhook_inbox_tools import sample_events
from webhook_inbox_tools.cli.params import positive_int
from webhook_inbox_tools.cli.signing import (
    add_providers_option,
    destination,
    load_registry,
    resolve_provider,
    webhook_url,
    with_signing_key,
)
from webhook_inbox_tools.dev.env_file import URL_VARIABLE, running_dev_environment
from webhook_inbox_tools.dev.samples import application_handlers

MAX_CONCURRENCY = 32  # a laptop's load test, not a flood
SHOWN_FAILURES = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", nargs="?", metavar="PROVIDER", help="a configured provider")
    parser.add_argument("event_type", nargs="?", metavar="EVENT_TYPE", help="see --list")
    parser.add_argument(
        "--list", action="store_true", help="list the event types each provider can trigger"
    )
    parser.add_argument(
        "--url",
        help=f"base or full webhook URL (default: ${URL_VARIABLE}, else the URL of the "
        "webhook-inbox dev running from this folder)",
    )
    add_providers_option(parser)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="set a field of the body (dotted path, e.g. data.object.id=cus_1; VALUE as JSON "
        "when it parses, else a string); repeatable",
    )
    parser.add_argument(
        "--count", type=positive_int, default=1, help="deliveries to send, each fresh (default 1)"
    )
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=1,
        help=f"deliveries in flight at once, at most {MAX_CONCURRENCY} (default 1)",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    parser.add_argument(
        "--signing-key-file",
        metavar="FILE",
        help="sign with the secret or private key in FILE (a provider configured with public "
        "keys only)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


@dataclass(frozen=True)
class Answer:
    event_id: str | None
    status: int  # 0: no answer
    body: str
    elapsed_ms: float
    error: str = ""  # why there was no answer


def cmd_trigger(args: argparse.Namespace) -> int:
    registry = load_registry(args.providers)
    if args.list:
        print_catalog(registry, args.provider)
        return 0
    if not args.provider or not args.event_type:
        raise ConfigurationError("give PROVIDER and EVENT_TYPE (webhook-inbox trigger --list)")
    if args.concurrency > MAX_CONCURRENCY:
        raise ConfigurationError(f"--concurrency is at most {MAX_CONCURRENCY}")
    provider = resolve_provider(registry, args.provider)
    if args.signing_key_file:
        provider = with_signing_key(provider, args.signing_key_file)
    overrides = [sample_events.parse_override(text) for text in args.override]
    # Build one before sending anything: an unknown type or a bad override is a usage error.
    sample_events.build(provider, args.event_type, now=int(time.time()), overrides=overrides)
    target = webhook_url(base_url(args.url), provider.name)
    if urlsplit(target).scheme not in {"http", "https"}:
        raise ConfigurationError(f"{target!r} is not an http(s) URL")

    def one(_: int) -> Answer:
        return send_one(provider, args.event_type, overrides, target, args.timeout)

    started = time.monotonic()
    workers = min(args.concurrency, args.count)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        answers = list(pool.map(one, range(args.count)))
    wall_s = time.monotonic() - started
    unreached = [a for a in answers if not a.status]
    if len(unreached) == len(answers):
        raise ConfigurationError(
            f"cannot reach {target}: {unreached[0].error} (is webhook-inbox dev running? "
            "or pass --url)"
        )
    if args.json:
        print(json.dumps(_document(target, answers, wall_s), indent=2))
    elif len(answers) == 1:
        _print_answer(target, args.event_type, answers[0])
    else:
        _print_summary(target, args.event_type, answers, wall_s, workers)
    return 0 if all(200 <= a.status < 300 for a in answers) else 1


def base_url(given: str | None) -> str:
    url = given or config.env(URL_VARIABLE) or running_dev_environment().get(URL_VARIABLE)
    if not url:
        raise ConfigurationError(
            "no webhook-inbox dev is running from this folder: start one, or pass --url"
        )
    return url


def send_one(
    provider: providers.Provider,
    event_type: str,
    overrides: list[sample_events.Override],
    target: str,
    timeout: float,
) -> Answer:
    now = int(time.time())
    built = sample_events.build(provider, event_type, now=now, overrides=overrides)
    signed = providers.sign_delivery(
        provider, built.body, event_id=built.event_id, timestamp=now, event_type=event_type,
        url=target,
    )  # fmt: skip
    url = destination(provider, target, signed)
    event_id = stored_event_id(provider, signed.headers, signed.body, url, now) or built.event_id
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked by the caller
        url, data=signed.body, headers=signed.headers, method="POST"
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310
            status, answer = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, answer = exc.code, exc.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return Answer(event_id, 0, "", _ms(started), str(reason))
    text = answer.decode("utf-8", errors="replace")
    return Answer(event_id, status, text, _ms(started))


def stored_event_id(
    provider: providers.Provider, headers: dict[str, str], body: bytes, url: str, now: int
) -> str | None:
    """The key ingest stores this delivery's (first) event under: what `events show` and
    `replay` take. Worked out as ingest does, from what the provider signed — for GitHub and
    Shopify a digest of the type and body, for a generic sender without ``id_path`` too."""
    from webhook_inbox.errors import WebhookInboxError
    from webhook_inbox.ingest.schemes import Delivery, Reply

    delivery = provider.as_called(
        Delivery({k.lower(): v for k, v in headers.items()}, body, "POST", url)
    )
    try:
        verified = provider.verify(delivery, now=now)
        payload = provider.scheme.parse(delivery) if verified.payload is None else verified.payload
        found = provider.scheme.identify(delivery, payload, verified)
    except WebhookInboxError:
        return None
    if isinstance(found, Reply) or not found:
        return None
    return found[0].event_id


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _print_answer(target: str, event_type: str, answer: Answer) -> None:
    if not answer.status:
        print(f"POST {target} [{event_type}] -> no answer: {answer.error}")
        return
    what = f" {answer.event_id}" if answer.event_id else ""
    print(
        f"POST {target} [{event_type}]{what} -> {answer.status} {_phrase(answer.status)} "
        f"({answer.elapsed_ms:.0f} ms)"
    )
    if answer.body:
        print(answer.body)


def _print_summary(
    target: str, event_type: str, answers: list[Answer], wall_s: float, workers: int
) -> None:
    counts: dict[str, int] = {}
    for answer in answers:
        key = f"{answer.status} {_phrase(answer.status)}" if answer.status else "no answer"
        counts[key] = counts.get(key, 0) + 1
    times = sorted(a.elapsed_ms for a in answers if a.status)
    print(
        f"POST {target} [{event_type}] x{len(answers)}, {workers} at a time: "
        f"{len(answers) / wall_s:.1f}/s over {wall_s:.2f} s"
    )
    print("  answers: " + ", ".join(f"{key} x{n}" for key, n in sorted(counts.items())))
    if times:
        print(
            f"  latency: p50 {_percentile(times, 50):.0f} ms, p95 {_percentile(times, 95):.0f} "
            f"ms, max {times[-1]:.0f} ms"
        )
    failed = [a for a in answers if not 200 <= a.status < 300][:SHOWN_FAILURES]
    for answer in failed:
        said = answer.body.strip() or answer.error
        print(f"  {answer.event_id or '-'}: {answer.status or 'no answer'} {said}")


def _percentile(ordered: list[float], percent: int) -> float:
    index = max(0, -(-len(ordered) * percent // 100) - 1)  # nearest rank
    return ordered[index]


def _document(target: str, answers: list[Answer], wall_s: float) -> dict[str, object]:
    return {
        "url": target,
        "seconds": round(wall_s, 3),
        "answers": [
            {
                "event_id": a.event_id,
                "status": a.status or None,
                "body": a.body,
                "ms": round(a.elapsed_ms, 1),
                **({"error": a.error} if a.error else {}),
            }
            for a in answers
        ],
    }


def print_catalog(registry: providers.Registry, only: str | None) -> None:
    """Each provider's triggerable types, the handler each runs, and handlers without a sample."""
    names = [resolve_provider(registry, only).name] if only else sorted(registry.providers)
    try:
        handlers = application_handlers()
    except ConfigurationError as exc:
        print(f"warning: handlers not shown: {exc}", file=sys.stderr)
        handlers = {}
    for name in names:
        provider = registry.providers[name]
        print(f"{name} ({provider.scheme.name})")
        types = sample_events.event_types(provider)
        for event_type in types:
            handler = handlers.get((name, event_type))
            runs = f"handler {handler.__name__}" if handler else "no handler: ignored"
            print(f"  {event_type:<34} {runs}")
        for (owner, event_type), handler in sorted(handlers.items()):
            if owner == name and event_type not in types:
                print(f"  {event_type:<34} handler {handler.__name__}; no sample to trigger")
