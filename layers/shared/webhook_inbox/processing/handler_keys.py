"""Handler keys that can never match, judged against the types each sender is known to send.

An event whose (provider, type) no key matches is marked ``ignored`` without a word, so a key
with a typo fails silently. The known types are the project's samples' (one list per signature
scheme, ``known_types.json`` beside this module, generated from tools/webhook_inbox_tools/samples
by ``python -m webhook_inbox_tools.handler_lab.keys`` and kept equal by a test). They list the
common types, not every type a sender has: a type neither known nor close to a known one is not
reported.

The processor runs :func:`cold_start_problems` when it installs the application's map: it never
reads the providers registry (it has no access to the signing secrets, by design), so it judges a
key whose provider is named after its scheme (``stripe``, ``github``); ``webhook-inbox dev`` and
``check-handlers`` read the providers file and also judge the others and unconfigured names.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

KNOWN_TYPES_FILE = Path(__file__).with_name("known_types.json")


@dataclass(frozen=True)
class KeyProblem:
    provider: str
    event_type: str
    message: str
    warning: bool = True  # False: a note (never an error, even with --strict)

    def __str__(self) -> str:
        return f"handler key ({self.provider!r}, {self.event_type!r}): {self.message}"


@functools.cache
def known_types() -> dict[str, list[str]]:
    """Per signature scheme, the event types its samples carry."""
    loaded: dict[str, list[str]] = json.loads(KNOWN_TYPES_FILE.read_text())
    return loaded


def type_problem(provider: str, event_type: str, known: list[str]) -> KeyProblem | None:
    """What is wrong with ``(provider, event_type)`` given the types ``provider`` sends."""
    if not known or event_type in known:
        return None
    if event_type.endswith("*"):
        prefix = event_type[:-1]
        if any(t.startswith(prefix) for t in known):
            return None
        return KeyProblem(
            provider,
            event_type,
            f"no type {provider} is known to send matches it (known: {', '.join(known)})",
            warning=False,
        )
    suffixed = [t for t in known if t.startswith(event_type + ".")]
    if suffixed:
        return KeyProblem(
            provider,
            event_type,
            f"{provider} sends these events with an action, e.g. {', '.join(suffixed[:3])}: "
            f"this key never matches; use ({provider!r}, {event_type + '.*'!r}) or an exact type",
        )
    closest = difflib.get_close_matches(event_type, known, n=3, cutoff=0.8)
    if closest:
        return KeyProblem(
            provider,
            event_type,
            f"not a type {provider} is known to send; closest: {', '.join(closest)}",
        )
    return None


def cold_start_problems(keys: Iterable[tuple[str, str]]) -> list[KeyProblem]:
    """The warnings the processor can give without the registry: keys of a provider named
    after its scheme whose type that scheme never sends."""
    by_scheme = known_types()
    found = []
    for provider, event_type in sorted(keys):
        problem = type_problem(provider, event_type, by_scheme.get(provider, []))
        if problem is not None and problem.warning:
            found.append(problem)
    return found
