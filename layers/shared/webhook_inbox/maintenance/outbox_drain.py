"""One outbox batch: claim, publish, record each message's outcome.

The claim commits before anything is published (its time lease, not a row lock, keeps an
overlapping sweeper away while we talk to AWS), and outcomes are recorded in a second short
transaction. If the process dies between the two, the lease expires, another sweep claims the
message again and republishes it under the same deduplication key: at least once, never lost.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import Connection

from webhook_inbox.backoff import backoff_delay
from webhook_inbox.maintenance.publishers import Publisher
from webhook_inbox.store import outbox


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_seconds: float
    cap_seconds: float


@dataclass(frozen=True)
class DrainOutcome:
    claimed: int
    published: int
    retried: int
    dead: int
    not_attempted: int
    # Distinct failure texts from the destination (AWS error codes and messages).
    errors: tuple[str, ...] = ()


def drain_batch(
    conn: Connection[Any],
    publisher: Publisher,
    *,
    limit: int,
    lease_seconds: float,
    from_id: int,
    policy: RetryPolicy,
    keep_going: Callable[[], bool],
    rng: random.Random | None = None,
) -> DrainOutcome:
    with conn.transaction():
        messages = outbox.claim_messages(
            conn, limit=limit, lease_seconds=lease_seconds, from_id=from_id
        )
    if not messages:
        return DrainOutcome(0, 0, 0, 0, 0)

    result = publisher.publish(messages, keep_going=keep_going)

    attempts = {m.id: m.attempts for m in messages}
    retried = dead = 0
    with conn.transaction():
        if result.published:
            outbox.mark_published(conn, result.published)
        for message_id, failure in result.failed.items():
            # attempts already counts this one: claim_messages increments it.
            if failure.permanent or attempts[message_id] >= policy.max_attempts:
                outbox.mark_dead(conn, message_id, error=failure.error)
                dead += 1
            else:
                delay = backoff_delay(
                    attempts[message_id],
                    base_seconds=policy.base_seconds,
                    cap_seconds=policy.cap_seconds,
                    rng=rng,
                )
                outbox.mark_retry(conn, message_id, delay_seconds=delay, error=failure.error)
                retried += 1
        if result.not_attempted:
            outbox.release_claims(conn, result.not_attempted)
    return DrainOutcome(
        claimed=len(messages),
        published=len(result.published),
        retried=retried,
        dead=dead,
        not_attempted=len(result.not_attempted),
        errors=tuple(sorted({f.error for f in result.failed.values()})),
    )
