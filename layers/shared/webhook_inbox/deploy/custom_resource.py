"""CloudFormation custom resources: run an action, and always answer CloudFormation.

CloudFormation waits for a PUT of a JSON document to the request's pre-signed ``ResponseURL``.
A handler that raises, or times out without answering, leaves the stack waiting until the
resource's ``ServiceTimeout`` runs out (an hour by default), so :func:`run` answers on every path:

- the action succeeds: ``SUCCESS`` with its data;
- the action raises: ``FAILED`` with a short reason (the exception type and message, bounded);
- the Lambda is about to time out: a watchdog thread answers ``FAILED`` first. If the action
  can be cancelled (a database transaction that could still commit), the watchdog cancels it
  and waits for it to end before answering: a FAILED answer for a change that then commits
  would make CloudFormation roll back a stack whose database moved on. An action that still
  completes during that grace answers with its own result.

Only the standard library is used (no ``cfnresponse`` module, no extra dependency).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

SUCCESS = "SUCCESS"
FAILED = "FAILED"

# CloudFormation rejects responses over 4 KiB; the reason is the part that can grow.
MAX_REASON_CHARS = 1000
# Answer this long before the Lambda's own timeout if the action is still running.
WATCHDOG_MARGIN_S = 5.0
# After cancelling, how long the watchdog waits for the action to end (inside the margin).
CANCEL_GRACE_S = 2.5
SEND_ATTEMPTS = 3
SEND_TIMEOUT_S = 10.0

Action = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]


class _Responder:
    """Sends exactly one response per request, whichever of the handler and watchdog is first."""

    def __init__(self, event: Mapping[str, Any], physical_id: str) -> None:
        self._event = event
        self._physical_id = physical_id
        self._lock = threading.Lock()
        self.sent_status: str | None = None

    def send(self, status: str, reason: str, data: Mapping[str, Any] | None = None) -> bool:
        with self._lock:
            if self.sent_status is not None:
                return False
            self.sent_status = status
        body = json.dumps(
            {
                "Status": status,
                "Reason": reason[:MAX_REASON_CHARS],
                "PhysicalResourceId": self._physical_id,
                "StackId": self._event.get("StackId", ""),
                "RequestId": self._event.get("RequestId", ""),
                "LogicalResourceId": self._event.get("LogicalResourceId", ""),
                "NoEcho": False,
                "Data": dict(data or {}),
            }
        ).encode()
        _put(str(self._event["ResponseURL"]), body)
        logger.info(
            "answered CloudFormation",
            extra={"status": status, "request_type": self._event.get("RequestType")},
        )
        return True


def _put(url: str, body: bytes) -> None:
    """PUT the response; a few quick retries, since an unanswered stack waits for the timeout."""
    if not url.startswith(("https://", "http://")):
        raise ValueError("ResponseURL is not an http(s) URL")
    # The pre-signed URL was signed for an empty content type: send exactly that.
    headers = {"Content-Type": "", "Content-Length": str(len(body))}
    last_error: Exception = RuntimeError("no attempt made")
    for attempt in range(SEND_ATTEMPTS):
        request = urllib.request.Request(url, data=body, method="PUT", headers=headers)  # noqa: S310 - scheme checked above
        try:
            with urllib.request.urlopen(request, timeout=SEND_TIMEOUT_S) as response:  # noqa: S310
                response.read()
            return
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            last_error = exc
            logger.warning("response PUT failed (attempt %d): %s", attempt + 1, type(exc).__name__)
            time.sleep(0.2 * (attempt + 1))
    raise last_error


def run(
    event: Mapping[str, Any],
    context: Any,
    *,
    on_create_or_update: Action,
    physical_id: str,
    on_delete: Action | None = None,
    cancel: Callable[[], None] | None = None,
) -> None:
    """Handle one custom-resource request and answer CloudFormation whatever happens.

    ``physical_id`` must stay the same across updates: a new id would make CloudFormation
    delete the "old" resource after an update. ``on_delete`` defaults to doing nothing.
    ``cancel`` is called from the watchdog's thread to stop the action (it must make the action
    return or raise soon; it must not itself block for long).
    """
    request_type = event.get("RequestType")
    # Keep the id CloudFormation already knows (Update/Delete carry it).
    responder = _Responder(event, str(event.get("PhysicalResourceId") or physical_id))
    remaining_s = context.get_remaining_time_in_millis() / 1000.0
    action_ended = threading.Event()

    def on_timeout() -> None:
        if cancel is not None:
            try:
                cancel()
            except Exception:  # the FAILED answer below matters more than the cancel's error
                logger.exception("cancelling the action failed")
            # If the action ends now, it answers itself (its true outcome) and this is a no-op.
            action_ended.wait(CANCEL_GRACE_S)
        responder.send(FAILED, "timed out before the action finished")

    watchdog = threading.Timer(max(remaining_s - WATCHDOG_MARGIN_S, 0.0), on_timeout)
    watchdog.daemon = True
    watchdog.start()
    try:
        if request_type in ("Create", "Update"):
            data = on_create_or_update(event.get("ResourceProperties") or {})
        elif request_type == "Delete":
            data = on_delete(event.get("ResourceProperties") or {}) if on_delete else None
        else:
            raise ValueError(f"unknown RequestType {request_type!r}")
    except Exception as exc:  # every failure must become a FAILED answer (logged above)
        logger.exception("custom resource %s failed", request_type)
        watchdog.cancel()
        responder.send(FAILED, f"{type(exc).__name__}: {exc}")
        action_ended.set()
        return
    watchdog.cancel()
    responder.send(SUCCESS, f"{request_type} done", data)
    action_ended.set()
