"""The wake-up message on the processing queue: ``{"id": <inbox row id>}``, nothing more.

Ingest, the processor's retry wake-ups, the sweeper and the replay command all send it; the
processor parses it. SQS takes at most ten entries per SendMessageBatch call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SQS_MAX_BATCH = 10


def message_body(row_id: int) -> str:
    return json.dumps({"id": row_id})


def parse_body(body: str) -> int | None:
    """The inbox row id in ``{"id": N}``, or None for a poison message."""
    try:
        document = json.loads(body)
    except (TypeError, ValueError):
        return None
    row_id = document.get("id") if isinstance(document, dict) else None
    if isinstance(row_id, bool) or not isinstance(row_id, int) or row_id <= 0:
        return None
    return row_id


def chunks(row_ids: Sequence[int]) -> Iterator[list[int]]:
    for start in range(0, len(row_ids), SQS_MAX_BATCH):
        yield list(row_ids[start : start + SQS_MAX_BATCH])


@dataclass
class ChunkResult:
    sent: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (row id, SQS error code)


def send_chunk(
    client: Any,
    queue_url: str,
    row_ids: Sequence[int],
    *,
    delays: Mapping[int, int] | None = None,
) -> ChunkResult:
    """One SendMessageBatch call for up to ten rows, optionally each with its DelaySeconds.

    Entries SQS rejects come back in ``rejected``; a failure of the call itself (botocore's
    ``BotoCoreError`` / ``ClientError``) propagates, so the caller decides whether to go on.
    """
    if len(row_ids) > SQS_MAX_BATCH:
        raise ValueError(f"at most {SQS_MAX_BATCH} messages per SendMessageBatch")
    entries: list[dict[str, Any]] = []
    for row_id in row_ids:
        entry: dict[str, Any] = {"Id": str(row_id), "MessageBody": message_body(row_id)}
        if delays is not None:
            entry["DelaySeconds"] = delays[row_id]
        entries.append(entry)
    reply = client.send_message_batch(QueueUrl=queue_url, Entries=entries)
    return ChunkResult(
        sent=[int(ok["Id"]) for ok in reply.get("Successful", [])],
        rejected=[
            (int(bad["Id"]), str(bad.get("Code", "failed"))) for bad in reply.get("Failed", [])
        ],
    )
