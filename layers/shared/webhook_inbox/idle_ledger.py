"""The idle ledger: two small objects in an S3 bucket that let the sweeper know, without
connecting to the database, that nothing there can be due (docs/design.md, "Idle means idle").

* ``activity.json`` — ``{"until": <epoch s>}``: every function that writes to the database
  (ingest, the processor, the operator functions) makes sure, *before* it touches the database,
  that this says it may be writing until after its invocation ends
  (:class:`ActivityMarker`). An environment writes it at most once per :data:`MARK_WINDOW_S`,
  so a busy stack pays one PUT per warm environment per window, and a quiet one none.
* ``sweeper.json`` — the sweeper's record of its last database run that found nothing to do:
  when that run started, the earliest moment the database says work can come due, and the
  backlog it measured (re-reported while the run is skipped, so the alarms keep their data).
  Only the sweeper reads the ledger or writes this one (:mod:`webhook_inbox.maintenance.idle`),
  so the writers' code holds the PUT of their mark and nothing else of the bucket.

S3, because it is strongly consistent (a mark written is a mark read), reachable from every
network the stack runs in (the free gateway endpoint), and an idle stack only reads it: a GET
per sweeper run. Last writer wins on ``activity.json``: each writer computes ``until`` just
before its PUT, so the value read is at most one PUT's duration short of the latest promise;
:data:`MARK_MARGIN_S` covers that.
"""

from __future__ import annotations

import json
import time
from typing import Any

from webhook_inbox import aws

ACTIVITY_KEY = "activity.json"
RECORD_KEY = "sweeper.json"
# How far ahead one mark reaches past the invocation that writes it: a warm environment marks
# again only once this is used up (one PUT per environment per 5 minutes of traffic).
MARK_WINDOW_S = 300.0
# A later PUT may carry an ``until`` computed slightly earlier than one it overwrote: at most
# one PUT's duration (the slowest call limits, ~10 s) short. The sweeper adds this margin.
MARK_MARGIN_S = 15.0


def client() -> Any:
    """The process's S3 client (the ledger's every call goes through it)."""
    return aws.client("s3")


def aws_errors() -> tuple[type[BaseException], ...]:
    """What a failed S3 call raises (botocore is imported on the first call, not with this)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


class ActivityMarker:
    """One execution environment's promise that it may write to the database: written before
    the first database call of an invocation that its last promise does not cover.

    ``horizon_s`` is the longest this function's invocation can last (its timeout): a mark
    written at ``now`` covers writes until ``now + horizon_s + MARK_WINDOW_S``.
    """

    def __init__(self, bucket: str, *, horizon_s: float) -> None:
        self.bucket = bucket
        self.horizon_s = horizon_s
        self.covered_until = 0.0

    def ensure(self, now: float | None = None) -> str | None:
        """Mark if needed; the AWS error code when the mark could not be written (the caller
        goes on: the next invocation tries again), else None. No bucket: nothing to mark."""
        if not self.bucket:
            return None
        now = time.time() if now is None else now
        if now + self.horizon_s <= self.covered_until:
            return None
        until = now + self.horizon_s + MARK_WINDOW_S
        try:
            aws.client("s3", limits=aws.ACTIVITY_MARK).put_object(
                Bucket=self.bucket,
                Key=ACTIVITY_KEY,
                Body=json.dumps({"until": until}).encode(),
                ContentType="application/json",
            )
        except aws_errors() as exc:
            return aws.error_code(exc)
        self.covered_until = until
        return None


_markers: dict[str, ActivityMarker] = {}


def mark_activity(bucket: str, *, horizon_s: float, now: float | None = None) -> str | None:
    """:meth:`ActivityMarker.ensure` with this process's marker for ``bucket`` (kept across
    warm invocations); the AWS error code when the mark failed."""
    if not bucket:
        return None
    marker = _markers.get(bucket)
    if marker is None or marker.horizon_s != horizon_s:
        marker = _markers[bucket] = ActivityMarker(bucket, horizon_s=horizon_s)
    return marker.ensure(now)
