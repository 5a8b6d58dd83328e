"""Handler keys that can never match: checked at ``webhook-inbox dev``'s start and by
``check-handlers`` (``--strict`` makes each an error).

An event whose (provider, type) no key matches is marked ``ignored`` without a word, so a key
with a typo fails silently. What is checked, against the providers file and the types the
project knows for each scheme (its sample files, tools/webhook_inbox_tools/samples/):

- a provider name that is not configured: its events can never arrive;
- a type the provider sends only with a suffix: GitHub sends ``issues.opened``, never
  ``issues``, so ``("github", "issues")`` never matches (``issues.*`` would);
- a type close to a known one but not it (``customer.create`` for ``customer.created``);
- a pattern (``invoice.*``) that no known type matches, as a note only.

The samples list the common types, not every type a sender has: a type that is neither known
nor close to a known one is not reported.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from webhook_inbox.ingest import providers
from webhook_inbox_tools import sample_events


@dataclass(frozen=True)
class KeyProblem:
    provider: str
    event_type: str
    message: str
    warning: bool = True  # False: a note (never an error, even with --strict)

    def __str__(self) -> str:
        return f"handler key ({self.provider!r}, {self.event_type!r}): {self.message}"


def check_keys(keys: Iterable[tuple[str, str]], registry: providers.Registry) -> list[KeyProblem]:
    found = []
    for provider_name, event_type in sorted(keys):
        provider = registry.get(provider_name)
        if provider is None:
            closest = difflib.get_close_matches(provider_name, list(registry.providers), n=3)
            hint = f"; closest configured: {', '.join(closest)}" if closest else ""
            found.append(
                KeyProblem(
                    provider_name,
                    event_type,
                    f"provider {provider_name!r} is not configured: its events can never "
                    f"arrive{hint}",
                )
            )
            continue
        problem = _type_problem(provider, event_type)
        if problem:
            found.append(problem)
    return found


def _type_problem(provider: providers.Provider, event_type: str) -> KeyProblem | None:
    known = sample_events.event_types(provider)
    if not known or event_type in known:
        return None
    name = provider.name
    if event_type.endswith("*"):
        prefix = event_type[:-1]
        if not any(t.startswith(prefix) for t in known):
            return KeyProblem(
                name,
                event_type,
                f"no type {name} is known to send matches it (known: {', '.join(known)})",
                warning=False,
            )
        return None
    suffixed = [t for t in known if t.startswith(event_type + ".")]
    if suffixed:
        return KeyProblem(
            name,
            event_type,
            f"{name} sends these events with an action, e.g. {', '.join(suffixed[:3])}: this "
            f"key never matches; use ({name!r}, {event_type + '.*'!r}) or an exact type",
        )
    closest = difflib.get_close_matches(event_type, known, n=3, cutoff=0.8)
    if closest:
        return KeyProblem(
            name,
            event_type,
            f"not a type {name} is known to send; closest: {', '.join(closest)}",
        )
    return None
