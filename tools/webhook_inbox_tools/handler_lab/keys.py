"""Handler keys that can never match: checked at ``webhook-inbox dev``'s start and by
``check-handlers`` (``--strict`` makes each an error), against the providers file.

Beside what the processor checks at its cold start (a type the sender is never known to send:
:mod:`webhook_inbox.processing.handler_keys`), these know each provider's scheme from the file,
so they judge every key, and name a provider that is not configured (its events can never
arrive). The known types are the sample files' (tools/webhook_inbox_tools/samples/).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable

from webhook_inbox.ingest import providers
from webhook_inbox.processing.handler_keys import KNOWN_TYPES_FILE, KeyProblem, type_problem
from webhook_inbox_tools import sample_events

__all__ = ["KeyProblem", "check_keys", "known_types_by_scheme", "write_known_types"]


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
        problem = type_problem(provider_name, event_type, sample_events.event_types(provider))
        if problem:
            found.append(problem)
    return found


def known_types_by_scheme() -> dict[str, list[str]]:
    """What the processor's layer carries: every sample type, per scheme (every endpoint kind)."""
    found = {}
    for scheme in sorted(path.stem for path in sample_events.SAMPLES_DIR.glob("*.json")):
        catalog = sample_events.catalog(scheme)
        if catalog is not None:
            found[scheme] = sorted({sample.event_type for sample in catalog.events.values()})
    return found


def write_known_types() -> None:
    KNOWN_TYPES_FILE.write_text(json.dumps(known_types_by_scheme(), indent=1) + "\n")


# After a sample file changes: python -m webhook_inbox_tools.handler_lab.keys
if __name__ == "__main__":
    write_known_types()
