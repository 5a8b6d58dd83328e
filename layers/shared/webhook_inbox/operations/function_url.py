"""The operator function's HTTP side: a Function URL event in, one JSON answer out.

The function sits behind a Function URL with ``AuthType: AWS_IAM``: Lambda runs it only for a
SigV4-signed request whose principal may call it, and tells it who that principal is in
``requestContext.authorizer.iam`` (``userArn``, else ``callerId``). That, and nothing in the
body, is the operator every action records; an event without it (a direct ``lambda:Invoke``,
which its policies do not allow) is refused.

The one place an operator request's errors become HTTP answers:

| what | status | body |
|---|---|---|
| the answer | 200 | ``{"result": …, "messages": […]}`` (``commands.Answer.wire``) |
| a malformed request: an unknown key, a value out of range | 400 | ``{"error": …}`` |
| no caller AWS authenticated; an act command or a payload at read level | 403 | ``{"error": …}`` |
| ``events show`` of no event, ``resume`` of a key not paused | 404 | ``{"error": …}`` |
| ``pause`` of a key already paused | 409 | ``{"error": …}`` |
| not a POST | 405 | ``{"error": …}`` |
| an answer that cannot fit in Lambda's response (a huge payload) | 413 | ``{"error": …}`` |
| the database or its secret unavailable, no answer in time, a conflict | 503 | ``{"error": …}`` |

Anything else raises: the invocation fails (the caller gets Lambda's 502, the function's
``Errors`` metric pages ``operator-errors``).

Size: Lambda returns at most 6 MB. Every page and every selected set holds at most
:data:`MAX_ROWS` rows, and an answer is at most :data:`ANSWER_LIMIT_BYTES` as Lambda serialises
it; a listing past that is cut short with a cursor that continues it, a replay's or retry's
``before`` rows are cut with a note, anything else (a payload) is a 413.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from psycopg import Connection

from webhook_inbox.errors import (
    OperatorAnswerTooLarge,
    OperatorForbidden,
    OperatorRequestRefused,
    SecretUnavailable,
    StoreConflict,
    StoreUnavailable,
)
from webhook_inbox.operations import commands, requests

MAX_ROWS = 500
# Lambda's synchronous response limit is 6 MB (6,291,456 bytes): room for its own framing.
ANSWER_LIMIT_BYTES = 5 * 1024 * 1024
_OPERATOR_LENGTH = 200  # operator_actions.operator's bound
_JSON = {"content-type": "application/json"}
# Which rows an answer may shed to fit, and whether the shedding keeps a cursor.
_LISTED = {"events": True, "messages": True, "before": False}


@dataclass
class Handled:
    """The Function URL response, and the fields of the function's log line."""

    response: dict[str, Any]
    log: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> int:
        return int(self.response["statusCode"])


def caller_of(event: Mapping[str, Any], level: str) -> commands.Caller:
    """The principal AWS authenticated for this request (never anything the body says)."""
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    iam = authorizer.get("iam") if isinstance(authorizer, Mapping) else None
    who = (iam.get("userArn") or iam.get("callerId")) if isinstance(iam, Mapping) else None
    if not isinstance(who, str) or not who.strip():
        raise OperatorForbidden(
            "no caller AWS authenticated: call the operator function through its Function URL "
            "(AuthType AWS_IAM) with a SigV4-signed request, as `webhook-inbox … --stack` does"
        )
    return commands.Caller(who.strip()[:_OPERATOR_LENGTH], level)


def _method(event: Mapping[str, Any]) -> str:
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, Mapping) else None
    return str(http.get("method", "")) if isinstance(http, Mapping) else ""


def _body(event: Mapping[str, Any]) -> Any:
    raw = event.get("body") or ""
    try:
        text = base64.b64decode(raw, validate=True) if event.get("isBase64Encoded") else raw
        return json.loads(text)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise OperatorRequestRefused(f"the body is not a JSON object: {exc}") from None


def handle(
    event: Mapping[str, Any],
    *,
    level: str,
    connection: Callable[[], Connection[Any]],
    queue: commands.Queue | None,
) -> Handled:
    """Answer one Function URL request at ``level`` (``read`` or ``act``)."""
    log: dict[str, Any] = {"operator_level": level}
    if _method(event) != "POST":
        return Handled(_error(405, "POST a JSON command (docs/operate.md)"), log)
    try:
        caller = caller_of(event, level)
        log["operator"] = caller.operator
        body = _body(event)
        log["command"] = requests.command_of(body)
        request = requests.parse(body, max_rows=MAX_ROWS)
        answer = commands.run(connection(), request, caller, queue=queue, max_rows=MAX_ROWS)
        log.update(answer.log)
        return Handled(_fitted(answer), log)
    except OperatorRequestRefused as exc:
        return Handled(_error(exc.status, str(exc)), {**log, "refused": str(exc)[:300]})
    except SecretUnavailable as exc:
        return Handled(_error(503, f"the database secret cannot be read: {exc}"), log)
    except StoreUnavailable as exc:
        message = (
            f"the database did not answer ({exc}); an action's rows may be partly done: "
            "look with `events list` / `events show` before running it again"
        )
        return Handled(_error(503, message), log)
    except StoreConflict as exc:  # a deadlock or serialization failure: its transaction undone
        return Handled(_error(503, f"the database reported a conflict ({exc}): run it again"), log)


def _error(status: int, message: str) -> dict[str, Any]:
    return {"statusCode": status, "headers": _JSON, "body": commands.encode({"error": message})}


def _ok(document: Mapping[str, Any]) -> dict[str, Any]:
    return {"statusCode": 200, "headers": _JSON, "body": commands.encode(document)}


def response_size(response: Mapping[str, Any]) -> int:
    """The response's size as Lambda's runtime serialises it (json.dumps: ASCII, escaped)."""
    return len(json.dumps(response))


def _fitted(answer: commands.Answer) -> dict[str, Any]:
    """The 200 response, its rows cut so that it fits (see the module's docstring)."""
    response = _ok(answer.wire())
    size = response_size(response)
    if size <= ANSWER_LIMIT_BYTES:
        return response
    result = dict(answer.result)
    for key, keeps_cursor in _LISTED.items():
        rows = result.get(key)
        if not isinstance(rows, list) or not rows:
            continue
        kept = list(rows)
        while kept and size > ANSWER_LIMIT_BYTES:
            kept = kept[: len(kept) // 2]
            result[key] = kept
            size = response_size(_ok({**answer.wire(), "result": result}))
        messages = list(answer.messages)
        if keeps_cursor and kept:
            result["next_cursor"] = kept[-1]["id"]
            messages.append(
                f"cut at {len(kept)} of {len(rows)} rows to stay under the operator function's "
                f"{ANSWER_LIMIT_BYTES // 2**20} MiB answer: --cursor {kept[-1]['id']} continues"
            )
        elif not keeps_cursor:
            result["notes"] = [
                *result.get("notes", []),
                f"{key}: {len(rows) - len(kept)} of {len(rows)} rows left out of this answer "
                f"(over the operator function's {ANSWER_LIMIT_BYTES // 2**20} MiB)",
            ]
        response = _ok({**answer.wire(), "result": result, "messages": messages})
        size = response_size(response)
        if size <= ANSWER_LIMIT_BYTES:
            return response
    raise OperatorAnswerTooLarge(
        f"the answer is {size:,} bytes as Lambda returns it, over the operator function's "
        f"{ANSWER_LIMIT_BYTES:,}: a payload this large can be read on the database itself "
        "(`webhook-inbox events show … --payload --database-url …` from inside the VPC)"
    )
