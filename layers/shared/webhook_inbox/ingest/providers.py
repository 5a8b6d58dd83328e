"""The provider registry: which providers a deployment accepts, their schemes and secrets.

Configured by one JSON document in ``PROVIDERS_CONFIG`` or a file named by
``PROVIDERS_CONFIG_FILE`` (JSON, or TOML when the name ends in ``.toml``), parsed and validated
once per process::

    {"providers": {
        "stripe": {"scheme": "stripe",
                   "secrets": [{"secret_arn": "arn:aws:secretsmanager:…"}],
                   "tolerance_seconds": 300},
        "acme":   {"scheme": "hmac-sha256",
                   "secrets": [{"env": "ACME_SECRET"}, {"value": "dev-only"}],
                   "options": {"signature_header": "X-Acme-Signature"}}}}

Each secret is ``{"env": NAME}``, ``{"value": "…"}`` (local use) or ``{"secret_arn": ARN}``
(optionally with ``"json_key"`` when the secret string is a JSON object), and may carry
``"added_at"`` and ``"expires_at"`` (ISO 8601 UTC, ``2026-12-03T15:00:00Z``): from its
``expires_at`` on, a secret no longer verifies. Several secrets are all accepted (rotation); the
first one signs (:func:`sign_delivery`). A deployed stack may keep the same document in its
providers registry secret instead (:mod:`webhook_inbox.ingest.provider_registry`). Secrets Manager
values are cached (:mod:`webhook_inbox.ingest.managed_secrets`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlsplit

from webhook_inbox import config
from webhook_inbox.errors import (
    AuthenticationFailed,
    ConfigurationError,
    SignatureMismatch,
)
from webhook_inbox.ingest import schemes
from webhook_inbox.ingest.managed_secrets import MANAGED_SECRETS
from webhook_inbox.settings import ProvidersSettings

PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_TOLERANCE_S = 86_400

_PROVIDER_KEYS = frozenset({"scheme", "secrets", "tolerance_seconds", "options", "public_url"})


# --- secrets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretRef:
    """Where one secret comes from: ``env``, ``value`` or ``secret_arn``."""

    kind: str
    ref: str
    json_key: str | None = None
    # Epoch seconds from "expires_at": from then on the secret no longer verifies (rotation).
    expires_at: float | None = None

    @classmethod
    def parse(cls, raw: Any, where: str) -> SecretRef:
        if not isinstance(raw, Mapping):
            raise ConfigurationError(f"{where}: each secret is an object")
        kinds = [k for k in ("env", "value", "secret_arn") if k in raw]
        extra = set(raw) - {"env", "value", "secret_arn", "json_key", "added_at", "expires_at"}
        if len(kinds) != 1 or extra:
            raise ConfigurationError(f"{where}: a secret has exactly one of env, value, secret_arn")
        kind = kinds[0]
        ref = raw[kind]
        json_key = raw.get("json_key")
        if not isinstance(ref, str) or not ref:
            raise ConfigurationError(f"{where}: {kind} must be a non-empty string")
        if json_key is not None and (kind != "secret_arn" or not isinstance(json_key, str)):
            raise ConfigurationError(f"{where}: json_key is a string, only with secret_arn")
        if "added_at" in raw:
            utc_instant(raw["added_at"], f"{where}: added_at")
        expires = raw.get("expires_at")
        expires_at = None if expires is None else utc_instant(expires, f"{where}: expires_at")
        return cls(kind, ref, json_key, expires_at)

    def active(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at


def utc_instant(raw: Any, where: str) -> float:
    """Epoch seconds of an ISO 8601 UTC instant written with a ``Z`` (2026-12-03T15:00:00Z)."""
    from datetime import datetime

    try:
        if not isinstance(raw, str) or not raw.endswith("Z") or "T" not in raw:
            raise ValueError(raw)
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        raise ConfigurationError(
            f"{where} is an ISO 8601 UTC time like 2026-12-03T15:00:00Z"
        ) from None


# --- providers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Provider:
    name: str
    scheme: schemes.Scheme
    secret_refs: tuple[SecretRef, ...]
    tolerance_seconds: int = schemes.DEFAULT_TOLERANCE_S
    # The URL the provider is told to call, for schemes that sign it (custom domains, stages).
    public_url: str | None = None

    def secrets(self, now: float | None = None) -> list[str]:
        """The values of the secrets that have not expired at ``now`` (default: the time)."""
        moment = time.time() if now is None else now
        values = []
        for ref in (r for r in self.secret_refs if r.active(moment)):
            if ref.kind == "value":
                value = ref.ref
            elif ref.kind == "env":
                value = config.env(ref.ref)
                if not value:
                    raise ConfigurationError(f"provider {self.name}: ${ref.ref} is not set")
            else:
                value = MANAGED_SECRETS.get(ref.ref, ref.json_key)
            values.append(value)
        return values

    def as_called(self, delivery: schemes.Delivery) -> schemes.Delivery:
        """``delivery`` with the URL the provider called: ``public_url`` when configured, else
        the URL ingest rebuilt from the event.

        A ``public_url`` without a query string takes the request's query string. One with a
        query string is the URL as registered, verbatim (a REST API event has only decoded,
        unordered query parameters, which cannot always be re-encoded as sent); the request's
        parameters it does not name are ones the sender adds per request (Twilio's
        ``bodySHA256``) and follow it, in the request's order and encoding.
        """
        if not self.public_url:
            return delivery
        _, _, query = delivery.url.partition("?")
        registered = urlsplit(self.public_url).query
        if not registered:
            url = f"{self.public_url}?{query}" if query else self.public_url
        else:
            names = {name for name, _ in parse_qsl(registered, keep_blank_values=True)}
            added = [
                piece
                for piece in query.split("&")
                if piece and unquote_plus(piece.partition("=")[0]) not in names
            ]
            url = "&".join([self.public_url, *added])
        return dataclasses.replace(delivery, url=url)

    def handshake(self, delivery: schemes.Delivery, *, now: int) -> schemes.Reply | None:
        """The answer to an unsigned handshake of the provider's scheme (Meta's or Dropbox's
        GET, Asana's first POST), or None for a delivery to verify; only schemes that have such
        handshakes read the secrets for it."""
        if not self.scheme.unsigned_handshakes:
            return None
        self._require_live_secret(now)  # X's and Braintree's answers are keyed with the first
        return self.scheme.handshake(delivery, self.secrets(now))

    def _require_live_secret(self, now: int) -> None:
        if self.scheme.requires_secrets and not any(ref.active(now) for ref in self.secret_refs):
            raise AuthenticationFailed(
                f"provider {self.name} has no live secret (every one has expired): "
                f"`webhook-inbox providers rotate {self.name}` puts a new one in",
                reason="no_live_secret",
            )

    def verify(self, delivery: schemes.Delivery, *, now: int) -> schemes.Verified:
        """Verify a delivery; on a mismatch, re-read rotated managed secrets once and retry."""
        self._require_live_secret(now)
        try:
            return self.scheme.verify(
                delivery, self.secrets(now), now=now, tolerance=self.tolerance_seconds
            )
        except SignatureMismatch:
            managed = [r for r in self.secret_refs if r.kind == "secret_arn" and r.active(now)]
            refreshed = [MANAGED_SECRETS.force_refresh(r.ref, r.json_key) for r in managed]
            if not any(refreshed):
                raise
        return self.scheme.verify(
            delivery, self.secrets(now), now=now, tolerance=self.tolerance_seconds
        )


def _parse_provider(name: str, raw: Any) -> Provider:
    where = f"provider {name!r}"
    if not PROVIDER_NAME.fullmatch(name):
        raise ConfigurationError(f"{where}: names match ^[a-z0-9][a-z0-9_-]{{0,63}}$")
    if not isinstance(raw, Mapping):
        raise ConfigurationError(f"{where}: must be an object")
    unknown = set(raw) - _PROVIDER_KEYS
    if unknown:
        raise ConfigurationError(f"{where}: unknown key(s) {sorted(unknown)}")
    scheme_name = raw.get("scheme")
    if not isinstance(scheme_name, str):
        raise ConfigurationError(f"{where}: scheme is required")
    options = raw.get("options", {})
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"{where}: options must be an object")
    secrets = raw.get("secrets", [])
    if not isinstance(secrets, list):
        raise ConfigurationError(f"{where}: secrets must be a list")
    refs = tuple(SecretRef.parse(s, where) for s in secrets)
    try:
        scheme = schemes.build(scheme_name, options)
        if not refs and scheme.requires_secrets:
            # Only a scheme that downloads its sender's certificates can do without.
            raise ConfigurationError("secrets must be a non-empty list")
        for ref in refs:
            if ref.kind == "value":
                scheme.check_secret(ref.ref)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    except (ValueError, TypeError, LookupError) as exc:
        # A scheme's own decoding of a malformed option or key (base64, PEM, text that is not
        # ASCII): the class only, as the message may quote the secret.
        raise ConfigurationError(
            f"{where}: a scheme option or secret is malformed ({type(exc).__name__})"
        ) from None
    tolerance = raw.get("tolerance_seconds", scheme.default_tolerance_s)
    if (
        not isinstance(tolerance, int)
        or isinstance(tolerance, bool)
        or not 1 <= tolerance <= MAX_TOLERANCE_S
    ):
        raise ConfigurationError(f"{where}: tolerance_seconds must be 1..{MAX_TOLERANCE_S}")
    public_url = _public_url(raw.get("public_url"), where)
    return Provider(name, scheme, refs, tolerance, public_url)


def _public_url(raw: Any, where: str) -> str | None:
    """An absolute http(s) URL without a fragment (the sender never sends one); a query string
    only as registered with the provider (see :meth:`Provider.as_called`)."""
    if raw is None:
        return None
    try:
        parts = urlsplit(raw) if isinstance(raw, str) else None
    except ValueError:  # "Invalid IPv6 URL", a port that is not a number, …
        parts = None
    if (
        parts is None
        or parts.scheme not in {"https", "http"}
        or not parts.netloc
        or parts.fragment
        or str(raw).endswith(("?", "#"))
    ):
        raise ConfigurationError(
            f"{where}: public_url is an absolute http(s) URL without a fragment, "
            "e.g. https://hooks.example.com/webhooks/NAME"
        )
    return str(raw)


@dataclass(frozen=True)
class Registry:
    providers: Mapping[str, Provider]

    def get(self, name: str) -> Provider | None:
        return self.providers.get(name)

    def __getitem__(self, name: str) -> Provider:
        provider = self.providers.get(name)
        if provider is None:
            raise KeyError(name)
        return provider


def parse_config(document: Any) -> Registry:
    """Validate a parsed configuration document (see the module docstring)."""
    if not isinstance(document, Mapping) or set(document) != {"providers"}:
        raise ConfigurationError('provider config is an object with one key, "providers"')
    providers = document["providers"]
    if not isinstance(providers, Mapping):
        raise ConfigurationError('"providers" maps provider names to their settings')
    return Registry({name: _parse_provider(name, raw) for name, raw in providers.items()})


def load_config_text(text: str, *, toml: bool = False) -> Registry:
    if toml:
        import tomllib

        try:
            document: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(f"provider config is not TOML: {exc}") from None
    else:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"provider config is not JSON: {exc}") from None
    return parse_config(document)


_registry_lock = threading.Lock()
_registry_cache: dict[tuple[str | None, str | None], Registry] = {}


def registry() -> Registry:
    """The providers ``PROVIDERS_CONFIG`` / ``PROVIDERS_CONFIG_FILE`` name in the process
    environment (the tools' way; ingest passes its settings to :func:`registry_for`)."""
    configured = config.current(ProvidersSettings)
    return registry_for(configured.providers_config, configured.providers_config_file)


def registry_for(inline: str, path: str) -> Registry:
    """The providers of an inline configuration, else of a file: parsed once per configuration
    (per process)."""
    key = (inline or None, path or None)
    with _registry_lock:
        cached = _registry_cache.get(key)
        if cached is not None:
            return cached
        if inline:
            loaded = load_config_text(inline)
        elif path:
            try:
                text = Path(path).read_text("utf-8")
            except OSError as exc:
                raise ConfigurationError(f"cannot read PROVIDERS_CONFIG_FILE: {exc}") from None
            loaded = load_config_text(text, toml=path.endswith(".toml"))
        else:
            raise ConfigurationError("set PROVIDERS_CONFIG or PROVIDERS_CONFIG_FILE")
        _registry_cache.clear()
        _registry_cache[key] = loaded
        return loaded


def sign_delivery(
    provider: Provider,
    body: bytes,
    *,
    event_id: str | None = None,
    timestamp: int | None = None,
    event_type: str | None = None,
    url: str = "",
) -> schemes.Signed:
    """``body`` as an authentic delivery from ``provider`` (signed with its first secret), as
    the provider itself would send it: its headers (with a ``Content-Type``), body and URL.

    ``url`` is where it will be sent (``public_url`` wins when configured; URL-signed schemes
    sign it); ``event_id`` fills the id header for schemes that have one (a random one is made
    where the scheme signs it); ``timestamp`` defaults to now, and the secret is the first one
    not expired by then; ``event_type`` fills the type
    header for schemes that carry the type outside the body (GitHub ``X-GitHub-Event``, Shopify
    ``X-Shopify-Topic``, a generic ``type_header``).
    """
    content_type = (
        "application/x-www-form-urlencoded"
        if (provider.scheme.body_format == "form")
        else "application/json"
    )
    signed_at = int(time.time()) if timestamp is None else timestamp
    usable = provider.secrets(signed_at)  # the secrets the provider held at that time
    if not usable:
        raise ConfigurationError(f"provider {provider.name}: every secret has expired")
    signed = provider.scheme.sign(
        usable[0],
        body,
        timestamp=signed_at,
        event_id=event_id,
        event_type=event_type,
        url=provider.public_url or url,
    )
    headers = {"Content-Type": content_type, **signed.headers}
    return dataclasses.replace(signed, headers=headers)


def reset_for_tests() -> None:
    """Forget the parsed configurations, the cached secrets and the settings that name them."""
    with _registry_lock:
        _registry_cache.clear()
    MANAGED_SECRETS.clear()
    config.reset()


__all__: Sequence[str] = (
    "PROVIDER_NAME",
    "Provider",
    "Registry",
    "SecretRef",
    "load_config_text",
    "parse_config",
    "registry",
    "sign_delivery",
)
