"""`sign` and `send`: build an authentic delivery for any configured provider, or post one."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from webhook_inbox import aws, config
from webhook_inbox.errors import ConfigurationError
from webhook_inbox.ingest import providers, schemes
from webhook_inbox.settings import ProvidersSettings
from webhook_inbox_tools.cli import render
from webhook_inbox_tools.dev.apigw import delivery_event_v2, http_to_apigw_v1
from webhook_inbox_tools.dev.env_file import URL_VARIABLE, running_dev_environment
from webhook_inbox_tools.dev.lambda_runtime import sample_providers_file

FORMATS = ("headers", "curl", "apigw-v2", "apigw-v1", "json")
DEFAULT_BASE_URL = "http://127.0.0.1:3000"


def add_providers_option(parser: argparse.ArgumentParser) -> None:
    """--providers, as every command that signs reads it (sign, send, trigger)."""
    parser.add_argument(
        "--providers",
        metavar="FILE",
        help="provider configuration (default: $PROVIDERS_CONFIG, $PROVIDERS_CONFIG_FILE, else "
        "what the webhook-inbox dev running from this folder serves, else the sample "
        "events/providers.local.json)",
    )


def add_signing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("provider", metavar="PROVIDER", help="a provider from the configuration")
    parser.add_argument(
        "body_file", metavar="BODY_FILE", help="the exact bytes to send ('-' reads stdin)"
    )
    add_providers_option(parser)
    parser.add_argument("--event-id", help="id for schemes that carry it in a header")
    parser.add_argument("--type", dest="event_type", help="type for schemes with a type header")
    parser.add_argument("--timestamp", type=int, help="Unix seconds to sign with (default: now)")
    parser.add_argument(
        "--signing-key-file",
        metavar="FILE",
        help="sign with the secret or private key in FILE instead of the provider's first secret "
        "(for a provider configured with public keys only: docs/providers.md)",
    )


def providers_in_environment() -> bool:
    """Whether PROVIDERS_CONFIG or PROVIDERS_CONFIG_FILE is set (as ingest reads them)."""
    configured = config.current(ProvidersSettings)
    return bool(configured.providers_config or configured.providers_config_file)


def load_registry(path: str | None) -> providers.Registry:
    """The providers to sign for: an explicit file; else the configuration in the environment
    (as the deployed ingest function reads it); else the one a `webhook-inbox dev` running from
    this folder serves (its registry once `webhook-inbox providers` wrote it, else its providers
    file, as its ingest does); else the sample."""
    if path:
        return _registry_from_file(path)
    if providers_in_environment():
        return providers.registry()
    dev = running_dev_environment()
    served = _dev_registry(dev)
    if served is not None:
        return served
    if dev.get("PROVIDERS_CONFIG"):
        return providers.load_config_text(dev["PROVIDERS_CONFIG"])
    if dev.get("PROVIDERS_CONFIG_FILE"):
        return _registry_from_file(dev["PROVIDERS_CONFIG_FILE"])
    sample = sample_providers_file()
    if sample is None:
        raise ConfigurationError(
            "no provider configuration: pass --providers FILE or set PROVIDERS_CONFIG_FILE"
        )
    return providers.load_config_text(sample.read_text("utf-8"))


def _dev_registry(dev: Mapping[str, str]) -> providers.Registry | None:
    """The providers in the running dev's registry, once `webhook-inbox providers` has written
    it (until then, None: the dev serves its providers file)."""
    if not dev.get("PROVIDERS_REGISTRY_ARN"):
        return None
    from botocore.exceptions import BotoCoreError, ClientError

    from webhook_inbox_tools.cli.providers import store
    from webhook_inbox_tools.cli.providers.target import dev_target

    try:
        return store.read(dev_target(dev)).document.registry
    except (BotoCoreError, ClientError) as exc:
        raise ConfigurationError(
            f"cannot read the running dev's providers registry: {aws.error_code(exc)}"
        ) from None


def _registry_from_file(path: str) -> providers.Registry:
    try:
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None
    return providers.load_config_text(text, toml=path.endswith(".toml"))


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


@dataclass(frozen=True)
class SignedRequest:
    provider: providers.Provider
    signed: schemes.Signed
    url: str  # where to send it
    # Whether the body is the file's bytes (a scheme may sign inside the body: Mailgun).
    body_from_file: bool
    # Whether the signed body differs from what was read (Mailgun's signature, Linear's
    # webhookTimestamp): headers alone would then sign bytes nobody sees.
    body_rewritten: bool


def with_signing_key(provider: providers.Provider, path: str) -> providers.Provider:
    """``provider`` signing with the key in ``path`` (surrounding whitespace dropped), checked
    as the scheme checks a configured one."""
    try:
        key = Path(path).read_text("utf-8").strip()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None
    provider.scheme.check_secret(key)
    return dataclasses.replace(provider, secret_refs=(providers.SecretRef("value", key),))


def signed_request(args: argparse.Namespace) -> SignedRequest:
    provider = resolve_provider(load_registry(args.providers), args.provider)
    if args.signing_key_file:
        provider = with_signing_key(provider, args.signing_key_file)
    type_header = provider.scheme.options.get("type_header")
    if type_header and not args.event_type:
        # Ingest would answer such a delivery 400: the body cannot say what it is.
        raise ConfigurationError(
            f"{provider.name}: {provider.scheme.name} carries the event type in {type_header}, "
            "not in the body: pass --type"
        )
    body = _read_body(args.body_file)
    target = webhook_url(_base_url(args.url), provider.name)
    signed = providers.sign_delivery(
        provider,
        body,
        event_id=args.event_id,
        timestamp=args.timestamp if args.timestamp is not None else int(time.time()),
        event_type=args.event_type,
        url=target,
    )
    url = destination(provider, target, signed)
    rewritten = signed.body != body
    return SignedRequest(provider, signed, url, not rewritten and args.body_file != "-", rewritten)


def _base_url(given: str | None) -> str:
    """``send``'s URL; for ``sign``, --url, else where the running dev listens, else port 3000."""
    if given:
        return given
    return (
        config.env(URL_VARIABLE) or running_dev_environment().get(URL_VARIABLE) or DEFAULT_BASE_URL
    )


def destination(provider: providers.Provider, target: str, signed: schemes.Signed) -> str:
    """Where to send ``signed``: the URL it was signed for, or — when the provider's
    ``public_url`` names the URL it signs — ``target`` with the signed URL's query string
    (Twilio's bodySHA256, say), as a reverse proxy in front of ingest would pass it on."""
    if not provider.public_url:
        return signed.url
    return urlunsplit(urlsplit(target)._replace(query=urlsplit(signed.url).query))


def webhook_url(base: str, provider: str) -> str:
    """``base`` as given when it already names a webhook route, else base + /webhooks/NAME."""
    if "/webhooks/" in urlsplit(base).path:
        return base
    return f"{base.rstrip('/')}/webhooks/{provider}"


def curl_command(url: str, headers: dict[str, str], body: bytes, body_file: str | None) -> str:
    """A ready-to-paste curl that sends exactly these bytes (from the file when there is one)."""
    lines = [f"curl -sS -i -X POST {shlex.quote(url)}"]
    lines += [f"-H {shlex.quote(f'{name}: {value}')}" for name, value in headers.items()]
    if body_file:
        lines.append(f"--data-binary {shlex.quote('@' + body_file)}")
    else:
        lines.append(f"--data-binary {shlex.quote(body.decode('utf-8'))}")
    return " \\\n  ".join(lines)


def cmd_sign(args: argparse.Namespace) -> int:
    request = signed_request(args)
    provider, signed, url = request.provider, request.signed, request.url
    path = f"/webhooks/{provider.name}"
    where = urlsplit(url)
    if args.format == "headers":
        if request.body_rewritten:
            raise ConfigurationError(
                f"{provider.scheme.name} signs inside the body, so the signed body is not "
                "BODY_FILE: use --format json (headers and body) or --format curl"
            )
        for name, value in signed.headers.items():
            print(f"{name}: {value}")
    elif args.format == "curl":
        try:
            body_file = args.body_file if request.body_from_file else None
            print(curl_command(url, signed.headers, signed.body, body_file))
        except UnicodeDecodeError:
            raise ConfigurationError(
                "a binary body from stdin cannot be inlined; pass a file"
            ) from None
    elif args.format == "apigw-v2":
        render.print_json(delivery_event_v2(provider.name, url, signed.headers, signed.body))
    elif args.format == "apigw-v1":
        stage = where.path.removesuffix(path).strip("/") or "prod"
        render.print_json(
            http_to_apigw_v1(
                path=path,
                headers=signed.headers.items(),
                body=signed.body,
                resource="/webhooks/{provider}",
                path_parameters={"provider": provider.name},
                stage=stage,
                domain_name=where.netloc,
                query=parse_qs(where.query, keep_blank_values=True) or None,
            )
        )
    else:
        document: dict[str, Any] = {
            "provider": provider.name,
            "url": url,
            "path": path,
            "headers": signed.headers,
        }
        if not request.body_from_file:
            document["body"] = signed.body.decode("utf-8", errors="replace")
        render.print_json(document)
    return 0


def cmd_send(args: argparse.Namespace) -> int:
    signed_as = signed_request(args)
    url, signed = signed_as.url, signed_as.signed
    if urlsplit(url).scheme not in {"http", "https"}:
        raise ConfigurationError(f"{url!r} is not an http(s) URL")
    request = urllib.request.Request(  # noqa: S310 - scheme checked above
        url, data=signed.body, headers=signed.headers, method="POST"
    )
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
