"""Just enough of the Lambda runtime to run the real handlers locally."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

Handler = Callable[[dict[str, Any], Any], Any]


class LocalContext:
    """A LambdaContext with a real deadline, so lease sizing sees a shrinking remaining time."""

    def __init__(self, function_name: str, timeout_s: float, memory_mb: int = 256) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        )
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def default_functions_dir() -> Path:
    """functions/ of the checkout this package was installed from (editable install)."""
    return Path(__file__).resolve().parents[3] / "functions"


def load_handler(functions_dir: Path, name: str) -> Handler:
    """Import functions/<name>/app.py as SAM packages it and return its ``handler``."""
    handler: Handler = load_module(functions_dir, name).handler
    return handler


def load_module(functions_dir: Path, name: str) -> ModuleType:
    """Import functions/<name>/app.py as SAM packages it."""
    path = functions_dir / name / "app.py"
    if not path.is_file():
        from webhook_inbox.errors import ConfigurationError

        raise ConfigurationError(
            f"{path} not found: run `webhook-inbox dev` from a checkout installed with "
            "`pip install -e .`, or pass --functions-dir"
        )
    module_name = f"webhook_inbox_dev_{name}_app"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def sqs_event(messages: Sequence[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """The event the SQS event source mapping hands the function for one received batch."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody") or hashlib.md5(m["Body"].encode()).hexdigest(),  # noqa: S324 - SQS's own checksum field
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


def failed_message_ids(response: Any, batch: Sequence[dict[str, Any]]) -> set[str]:
    """Which messages of a batch failed, by the ReportBatchItemFailures rules.

    No ``batchItemFailures`` (or an empty list) means all succeeded; an identifier that is empty
    or not in the batch makes Lambda treat the whole batch as failed.
    """
    every = {m["MessageId"] for m in batch}
    if not isinstance(response, dict):
        return set()
    failures = response.get("batchItemFailures") or []
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not identifier or identifier not in every:
            return every
        failed.add(identifier)
    return failed


def scheduled_event(rule_arn: str, region: str) -> dict[str, Any]:
    from datetime import UTC, datetime

    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


def sample_providers_file() -> Path | None:
    """The sample provider configuration that ships with the checkout (dev-only secrets)."""
    path = Path(__file__).resolve().parents[3] / "events" / "providers.local.json"
    return path if path.is_file() else None
