"""The providers' own secrets in Secrets Manager (``{"secret_arn": …}``), checked from the
sweeper at any traffic.

Ingest reads a provider's secret only when a delivery arrives, and then keeps serving the last
good value: a secret deleted, its key's grant revoked or its policy changed is noticed on the
next cold start, by that provider's deliveries answered 503, and pages nothing while the sender
is quiet. The sweeper's run reads each live ``secret_arn`` secret of the providers in use (the
registry's, or ``PROVIDERS_CONFIG``'s) the way ingest does, and reports the providers with one
it cannot read, by the AWS error code.

Cheap by construction: a secret is read at most once per :data:`CHECK_EVERY_S` per execution
environment, its verdict kept in between (a run reports the kept verdict, so the alarm, which
wants two datapoints in three minutes, sees one every run); a run reads only while its time
allows and stops at the first read that did not get an answer (Secrets Manager itself down or
unreachable: the other secrets keep their verdicts for the next run). The value read is never
kept: only whether it could be read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from webhook_inbox import aws
from webhook_inbox.ingest.providers import Provider

# Ingest caches a secret's value for five minutes (ingest.managed_secrets.SECRET_TTL_S): a
# secret that stops being readable reaches its 503s within that, and this check within this.
CHECK_EVERY_S = 300.0
# A kept verdict this old is not reported any more (the environment read nothing since).
VERDICT_MAX_AGE_S = 2 * CHECK_EVERY_S
# The reason reported for a secret whose value lacks its json_key: ingest answers 500 for it
# (configuration), which ingest-errors pages; the sweeper names it and counts nothing.
NO_JSON_KEY = "no_json_key"


@dataclass(frozen=True)
class _Verdict:
    checked_at: float  # time.monotonic()
    error: str | None  # the AWS error code, NO_JSON_KEY, or None: readable


_verdicts: dict[tuple[str, str | None], _Verdict] = {}
clock: Callable[[], float] = time.monotonic  # replaced by tests


def reset_for_tests() -> None:
    _verdicts.clear()


def unreadable(
    providers: Iterable[Provider],
    now: float,
    *,
    keep_going: Callable[[], bool],
) -> dict[str, str]:
    """Provider name -> the error of a live ``secret_arn`` secret of it that cannot be read
    (its first, by the order of its secrets); providers whose every such secret reads are left
    out. ``now`` (epoch seconds) decides which secrets are live; ``keep_going`` whether this
    run may still make a call."""
    found: dict[str, str] = {}
    reads_allowed = True
    for provider in providers:
        for ref in provider.secret_refs:
            if ref.kind != "secret_arn" or not ref.active(now):
                continue
            key = (ref.ref, ref.json_key)
            verdict = _verdicts.get(key)
            due = verdict is None or clock() - verdict.checked_at >= CHECK_EVERY_S
            if due and reads_allowed and keep_going():
                verdict, answered = _read(ref.ref, ref.json_key, clock())
                _verdicts[key] = verdict
                reads_allowed = answered
            if verdict is None or clock() - verdict.checked_at >= VERDICT_MAX_AGE_S:
                continue
            if verdict.error is not None and provider.name not in found:
                found[provider.name] = verdict.error
    return found


def _read(arn: str, json_key: str | None, at: float) -> tuple[_Verdict, bool]:
    """One GetSecretValue: the verdict, and whether Secrets Manager answered at all."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        text = aws.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
    except ClientError as exc:  # an answer: denied, not found, marked for deletion, throttled
        return _Verdict(at, aws.error_code(exc)), True
    except (BotoCoreError, KeyError) as exc:  # no answer (or no SecretString): stop this run
        return _Verdict(at, aws.error_code(exc)), not isinstance(exc, BotoCoreError)
    if json_key is not None and not _has_key(text, json_key):
        return _Verdict(at, NO_JSON_KEY), True
    return _Verdict(at, None), True


def _has_key(text: str, json_key: str) -> bool:
    try:
        value = json.loads(text)[json_key]
    except (ValueError, TypeError, KeyError):
        return False
    return isinstance(value, str) and bool(value)
