"""The wake-up messages on the processing queue, and nothing more than row ids.

``{"id": <inbox row id>}``: ingest, the processor's retry wake-ups, the sweeper's first send of a
row and the replay command. ``{"ids": [<row id>, …]}`` (at most ``MAX_IDS_PER_MESSAGE``): the
sweeper's re-wake of rows sent long ago and still waiting, most of which still have their own
message queued (docs/design.md, "Lost wake-ups"). The processor parses both. SQS takes at most
ten entries per SendMessageBatch call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SQS_MAX_BATCH = 10
# Row ids one re-wake message carries. One message per this many rows is what the re-wakes add to
# a long backlog in SQS (4 %); a batch of ten such messages is at most 250 rows for the processor.
MAX_IDS_PER_MESSAGE = 25


def wakeup_body(row_id: int) -> str:
    return json.dumps({"id": row_id})


def rewake_body(row_ids: Sequence[int]) -> str:
    if not 0 < len(row_ids) <= MAX_IDS_PER_MESSAGE:
        raise ValueError(f"a re-wake carries 1 to {MAX_IDS_PER_MESSAGE} row ids")
    return json.dumps({"ids": list(row_ids)})


def _row_id(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def parse_body(body: str) -> list[int] | None:
    """The inbox row ids in ``{"id": N}`` or ``{"ids": [N, …]}``, or None for a poison message
    (anything else, including an empty or oversized list or one bad id)."""
    try:
        document = json.loads(body)
    except (TypeError, ValueError):
        return None
    if not isinstance(document, dict) or len(document) != 1:
        return None
    if "id" in document:
        row_id = _row_id(document["id"])
        return None if row_id is None else [row_id]
    values = document.get("ids")
    if not isinstance(values, list) or not 0 < len(values) <= MAX_IDS_PER_MESSAGE:
        return None
    row_ids = [_row_id(value) for value in values]
    return None if None in row_ids else sorted({r for r in row_ids if r is not None})


def chunks(row_ids: Sequence[int], size: int = SQS_MAX_BATCH) -> Iterator[list[int]]:
    for start in range(0, len(row_ids), size):
        yield list(row_ids[start : start + size])


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
        entry: dict[str, Any] = {"Id": str(row_id), "MessageBody": wakeup_body(row_id)}
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


def send_rewakes(client: Any, queue_url: str, row_ids: Sequence[int]) -> ChunkResult:
    """One SendMessageBatch call carrying up to ten re-wake messages of up to
    ``MAX_IDS_PER_MESSAGE`` rows each; a rejected message rejects all of its rows.

    Failures are reported as :func:`send_chunk` reports them."""
    groups = list(chunks(row_ids, MAX_IDS_PER_MESSAGE))
    if len(groups) > SQS_MAX_BATCH:
        raise ValueError(f"at most {SQS_MAX_BATCH * MAX_IDS_PER_MESSAGE} rows per call")
    entries = [{"Id": str(n), "MessageBody": rewake_body(group)} for n, group in enumerate(groups)]
    reply = client.send_message_batch(QueueUrl=queue_url, Entries=entries)
    result = ChunkResult()
    for ok in reply.get("Successful", []):
        result.sent.extend(groups[int(ok["Id"])])
    for bad in reply.get("Failed", []):
        code = str(bad.get("Code", "failed"))
        result.rejected.extend((row_id, code) for row_id in groups[int(bad["Id"])])
    return result
