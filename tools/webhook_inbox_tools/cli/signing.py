"""`sign` and `send`: build an authentic delivery for any configured provider, or post one."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from webhook_inbox import providers
from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.cli import render
from webhook_inbox_tools.dev.apigw import http_to_apigw_v1, http_to_apigw_v2
from webhook_inbox_tools.dev.lambda_runtime import sample_providers_file

FORMATS = ("headers", "curl", "apigw-v2", "apigw-v1", "json")
DEFAULT_BASE_URL = "http://127.0.0.1:3000"


def add_signing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", metavar="PROVIDER", help="a provider from the configuration")
    parser.add_argument(
        "body_file", metavar="BODY_FILE", help="the exact bytes to send ('-' reads stdin)"
    )
    parser.add_argument(
        "--providers",
        metavar="FILE",
        help="provider configuration (default: $PROVIDERS_CONFIG, $PROVIDERS_CONFIG_FILE, "
        "else the sample events/providers.local.json)",
    )
    parser.add_argument("--event-id", help="id for schemes that carry it in a header")
    parser.add_argument("--type", dest="event_type", help="type for schemes with a type header")
    parser.add_argument("--timestamp", type=int, help="Unix seconds to sign with (default: now)")


def load_registry(path: str | None) -> providers.Registry:
    """The provider registry the deployed ingest function would use, or an explicit file."""
    if path:
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None
        return providers.load_config_text(text, toml=path.endswith(".toml"))
    if os.environ.get("PROVIDERS_CONFIG") or os.environ.get("PROVIDERS_CONFIG_FILE"):
        return providers.registry()
    sample = sample_providers_file()
    if sample is None:
        raise ConfigurationError(
            "no provider configuration: pass --providers FILE or set PROVIDERS_CONFIG_FILE"
        )
    return providers.load_config_text(sample.read_text("utf-8"))


def resolve_provider(registry: providers.Registry, name: str) -> providers.Provider:
    provider = registry.get(name)
    if provider is None:
        known = ", ".join(sorted(registry.providers)) or "none"
        raise ConfigurationError(f"unknown provider {name!r}; configured: {known}")
    return provider


def _read_body(name: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {name}: {exc.strerror}") from None


def signed_request(args: argparse.Namespace) -> tuple[providers.Provider, dict[str, str], bytes]:
    provider = resolve_provider(load_registry(args.providers), args.provider)
    body = _read_body(args.body_file)
    headers = providers.sign_delivery(
        provider,
        body,
        event_id=args.event_id,
        timestamp=args.timestamp if args.timestamp is not None else int(time.time()),
        event_type=args.event_type,
    )
    return provider, headers, body


def webhook_url(base: str, provider: str) -> str:
    """``base`` as given when it already names a webhook route, else base + /webhooks/NAME."""
    if "/webhooks/" in urlsplit(base).path:
        return base
    return f"{base.rstrip('/')}/webhooks/{provider}"


def curl_command(url: str, headers: dict[str, str], body: bytes, body_file: str | None) -> str:
    """A ready-to-paste curl that sends exactly these bytes (from the file when there is one)."""
    lines = [f"curl -sS -i -X POST {shlex.quote(url)}"]
    lines += [f"-H {shlex.quote(f'{name}: {value}')}" for name, value in headers.items()]
    if body_file and body_file != "-":
        lines.append(f"--data-binary {shlex.quote('@' + body_file)}")
    else:
        lines.append(f"--data-binary {shlex.quote(body.decode('utf-8'))}")
    return " \\\n  ".join(lines)


def cmd_sign(args: argparse.Namespace) -> int:
    provider, headers, body = signed_request(args)
    path = f"/webhooks/{provider.name}"
    if args.format == "headers":
        for name, value in headers.items():
            print(f"{name}: {value}")
    elif args.format == "curl":
        try:
            print(curl_command(webhook_url(args.url, provider.name), headers, body, args.body_file))
        except UnicodeDecodeError:
            raise ConfigurationError(
                "a binary body from stdin cannot be inlined; pass a file"
            ) from None
    elif args.format == "apigw-v2":
        render.print_json(
            http_to_apigw_v2(
                method="POST",
                path=path,
                query="",
                headers=headers.items(),
                body=body,
                source_ip="127.0.0.1",
                route_key="POST /webhooks/{provider}",
                path_parameters={"provider": provider.name},
            )
        )
    elif args.format == "apigw-v1":
        render.print_json(
            http_to_apigw_v1(
                path=path,
                headers=headers.items(),
                body=body,
                resource="/webhooks/{provider}",
                path_parameters={"provider": provider.name},
            )
        )
    else:
        render.print_json({"provider": provider.name, "path": path, "headers": headers})
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    provider, headers, body = signed_request(args)
    url = webhook_url(args.url, provider.name)
    if urlsplit(url).scheme not in {"http", "https"}:
        raise ConfigurationError(f"{url!r} is not an http(s) URL")
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - scheme checked above
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as reply:  # noqa: S310
            status, answer = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, answer = exc.code, exc.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"error: cannot reach {url}: {reason}", file=sys.stderr)
        return 1
    text = answer.decode("utf-8", errors="replace")
    if args.json:
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = text
        render.print_json({"url": url, "status": status, "body": parsed})
    else:
        print(f"POST {url} -> {status}")
        if text:
            print(text)
    return 0 if 200 <= status < 300 else 1
