"""The fresh interpreter's side of ``webhook-inbox invoke``: standard library only.

The parent runs this file's *source* with ``python -I -S -c`` (so nothing of the project is
imported to run it) and writes the invocation as JSON on stdin. Like the Lambda runtime it puts
the function's directory and the layers first on ``sys.path``, imports the handler (the init
phase), calls it once with a context whose remaining time counts down to the timeout, and
answers with the handler's JSON result or Lambda's error shape.

Only the answer goes to the original stdout; the function's own output (print, log lines) is
sent to stderr, as Lambda sends it to the log stream. At the timeout a watchdog answers
"Task timed out" and ends the process, as Lambda does, even if the handler is stuck in C code.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import threading
import time
import traceback
import uuid
from typing import Any, NoReturn

EXIT_OK, EXIT_FUNCTION_ERROR, EXIT_TIMEOUT = 0, 1, 124


class LambdaContext:
    """What the Lambda runtime passes as ``context`` (the attributes handlers read)."""

    def __init__(self, spec: dict[str, Any], request_id: str, deadline: float) -> None:
        self.function_name = spec["function_name"]
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = spec["memory_mb"]
        self.invoked_function_arn = (
            f"arn:aws:lambda:{spec['region']}:123456789012:function:{spec['function_name']}"
        )
        self.aws_request_id = request_id
        self.log_group_name = spec["log_group"]
        self.log_stream_name = "webhook-inbox-invoke"
        self.identity = None
        self.client_context = None
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class Invocation:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.request_id = str(uuid.uuid4())
        self.started = time.monotonic()
        self.init_ms = 0.0
        self._answered = threading.Lock()
        # The answer channel is the original stdout; fd 1 becomes stderr for the function.
        self._answer = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)

    def finish(self, answer: Any, code: int) -> NoReturn:
        """Answer once (handler and watchdog may race) and end the process without cleanup:
        Lambda freezes the environment, it never waits for the function's threads."""
        if not self._answered.acquire(blocking=False):
            time.sleep(3600)  # the other finisher is ending the process
        duration_ms = (time.monotonic() - self.started) * 1000
        used_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        sys.stdout.flush()
        print(
            f"END RequestId: {self.request_id}\nREPORT RequestId: {self.request_id}\t"
            f"Duration: {duration_ms:.2f} ms\tMemory Size: {self.spec['memory_mb']} MB\t"
            f"Max Memory Used: {used_mb} MB\tInit Duration: {self.init_ms:.2f} ms",
            file=sys.stderr,
        )
        self._report_imports()
        self._answer.write(json.dumps(answer))
        self._answer.flush()
        sys.stderr.flush()
        os._exit(code)

    def _report_imports(self) -> None:
        target = self.spec.get("report_imports")
        if not target:
            return
        modules = {
            name: getattr(module, "__file__", None) for name, module in list(sys.modules.items())
        }
        with open(target, "w", encoding="utf-8") as out:
            json.dump({"sys_path": sys.path, "executable": sys.executable, "modules": modules}, out)

    def error(self, exc: BaseException, error_type: str | None = None) -> dict[str, Any]:
        return {
            "errorMessage": str(exc),
            "errorType": error_type or type(exc).__name__,
            "requestId": self.request_id,
            "stackTrace": traceback.format_tb(exc.__traceback__),
        }


def _load_handler(inv: Invocation) -> Any:
    module_name, _, attribute = inv.spec["handler"].rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any init failure is the function's error to report
        traceback.print_exc()
        answer = inv.error(exc, "Runtime.ImportModuleError")
        answer["errorMessage"] = f"Unable to import module '{module_name}': {exc}"
        inv.finish(answer, EXIT_FUNCTION_ERROR)
    handler = getattr(module, attribute, None)
    if not callable(handler):
        inv.finish(
            {
                "errorMessage": f"Handler '{attribute}' missing on module '{module_name}'",
                "errorType": "Runtime.HandlerNotFound",
                "requestId": inv.request_id,
                "stackTrace": [],
            },
            EXIT_FUNCTION_ERROR,
        )
    return handler


def main() -> NoReturn:
    spec = json.loads(sys.stdin.read())
    inv = Invocation(spec)
    sys.path[:0] = spec["path"]
    os.chdir(spec["task_root"])
    handler = _load_handler(inv)
    inv.init_ms = (time.monotonic() - inv.started) * 1000

    timeout = float(spec["timeout"])
    print(f"START RequestId: {inv.request_id} Version: $LATEST", file=sys.stderr)
    deadline = time.monotonic() + timeout
    inv.started = time.monotonic()

    def on_timeout() -> None:
        inv.finish(
            {
                "errorMessage": f"Task timed out after {timeout:.2f} seconds",
                "errorType": "Sandbox.Timedout",
                "requestId": inv.request_id,
            },
            EXIT_TIMEOUT,
        )

    watchdog = threading.Timer(timeout, on_timeout)
    watchdog.daemon = True
    watchdog.start()
    context = LambdaContext(spec, inv.request_id, deadline)
    try:
        result = handler(spec["event"], context)
    except SystemExit as exc:  # Lambda reports an exit from the handler as Runtime.ExitError
        inv.finish(inv.error(exc, "Runtime.ExitError"), EXIT_FUNCTION_ERROR)
    except Exception as exc:  # noqa: BLE001 - an unhandled error is the invocation's result
        print(f"[ERROR] {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc()
        inv.finish(inv.error(exc), EXIT_FUNCTION_ERROR)
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        inv.finish(inv.error(exc, "Runtime.MarshalError"), EXIT_FUNCTION_ERROR)
    inv.finish(result, EXIT_OK)


if __name__ == "__main__":
    main()
