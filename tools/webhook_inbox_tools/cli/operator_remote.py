"""An operator command through an operator function's Function URL (``--stack``, or dev's).

The stack names its two URLs in its outputs (``OperatorReadUrl``, ``OperatorActUrl``), read with
CloudFormation's DescribeStacks; a command goes to the act URL when it changes something (or reads
a payload), else to the read URL. The request is an HTTPS POST of the command's JSON
(``webhook_inbox.operations.requests``), signed with SigV4 for the service ``lambda`` in the
stack's region with the caller's credentials (the default boto3 session's: profile, environment,
SSO, instance role), and sent with urllib. IAM decides whether the principal may call the URL
(the stack's OperatorReadPolicy / OperatorActPolicy); the function records that principal.

A ``webhook-inbox dev`` running in this folder serves the same function on its gateway (its env
file names the URLs); it takes the caller to be the local user and checks no signature.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook_inbox.errors import (
    ConfigurationError,
    OperatorAnswerTooLarge,
    OperatorConflict,
    OperatorForbidden,
    OperatorNotFound,
    OperatorRequestRefused,
    WebhookInboxError,
)
from webhook_inbox.operations import commands, function_url, requests
from webhook_inbox_tools.cli.operator_backend import Progress

READ_OUTPUT, ACT_OUTPUT = "OperatorReadUrl", "OperatorActUrl"
POLICY_OUTPUTS = {requests.READ: "OperatorReadPolicyArn", requests.ACT: "OperatorActPolicyArn"}
POLICIES = {requests.READ: "OperatorReadPolicy", requests.ACT: "OperatorActPolicy"}
DEV_READ_URL, DEV_ACT_URL = "WEBHOOK_INBOX_OPERATOR_READ_URL", "WEBHOOK_INBOX_OPERATOR_ACT_URL"
# The functions' timeout (template.yaml) and a little more: a long replay is still answered.
TIMEOUT_S = 75.0
EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
_ERRORS: dict[int, type[OperatorRequestRefused]] = {
    400: OperatorRequestRefused,
    403: OperatorForbidden,
    404: OperatorNotFound,
    409: OperatorConflict,
    413: OperatorAnswerTooLarge,
}


class RemoteCallFailed(WebhookInboxError):
    """The operator function could not be called, or failed; ``exit_code`` for the CLI."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Target:
    """An operator function's two URLs and how to sign for them."""

    label: str  # "stack NAME" or "the webhook-inbox dev running here"
    urls: Mapping[str, str]  # level -> URL
    region: str
    credentials: Any  # botocore credentials
    stack: str | None = None


def stack_target(stack: str, region: str | None) -> Target:
    """The stack's URLs (its outputs) and the caller's credentials for its region."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

    from webhook_inbox import config

    session = boto3.session.Session(region_name=region or config.env("AWS_REGION") or None)
    if not session.region_name:
        raise ConfigurationError(
            "no AWS region: pass --region, or set AWS_REGION or your profile's region"
        )
    cloudformation = session.client(
        "cloudformation",
        config=Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 3}),
    )
    try:
        found = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    except ClientError as exc:
        if "does not exist" in str(exc):
            raise ConfigurationError(
                f"no stack {stack!r} in {session.region_name}: check --stack and --region"
            ) from None
        code = exc.response.get("Error", {}).get("Code", "")
        raise RemoteCallFailed(
            f"cannot read stack {stack!r} ({code}): your AWS principal needs "
            f"cloudformation:DescribeStacks on it; attach the stack's {POLICIES['read']}"
        ) from exc
    except (BotoCoreError, NoRegionError) as exc:
        raise RemoteCallFailed(f"cannot read stack {stack!r}: {exc}") from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}
    if READ_OUTPUT not in outputs or ACT_OUTPUT not in outputs:
        raise ConfigurationError(
            f"stack {stack!r} has no outputs {READ_OUTPUT} and {ACT_OUTPUT}: it was deployed "
            "before the operator functions, or with CreateOperatorFunctions=false; `sam deploy` "
            "this version with it true first (or use --database-url from inside its VPC)"
        )
    credentials = session.get_credentials()
    if credentials is None:
        raise ConfigurationError(
            "no AWS credentials: set AWS_PROFILE or configure the AWS CLI (the command is "
            "signed with them, and the audit records their principal)"
        )
    urls = {requests.READ: outputs[READ_OUTPUT], requests.ACT: outputs[ACT_OUTPUT]}
    return Target(f"stack {stack}", urls, str(session.region_name), credentials, stack)


def dev_target(dev_env: Mapping[str, str]) -> Target:
    """The operator function on the gateway of the dev whose env file is ``dev_env``."""
    from botocore.credentials import Credentials

    urls = {requests.READ: dev_env[DEV_READ_URL], requests.ACT: dev_env[DEV_ACT_URL]}
    region = dev_env.get("AWS_REGION") or "us-east-1"
    credentials = Credentials(
        dev_env.get("AWS_ACCESS_KEY_ID", "dev"), dev_env.get("AWS_SECRET_ACCESS_KEY", "dev")
    )
    return Target("the webhook-inbox dev running here", urls, region, credentials)


def signed_headers(url: str, body: bytes, region: str, credentials: Any) -> dict[str, str]:
    """The headers of a SigV4-signed POST of ``body`` to a Function URL (service ``lambda``)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(
        method="POST", url=url, data=body, headers={"content-type": "application/json"}
    )
    SigV4Auth(credentials.get_frozen_credentials(), "lambda", region).add_auth(request)
    return dict(request.headers.items())


class RemoteBackend:
    max_rows = function_url.MAX_ROWS

    def __init__(self, target: Target) -> None:
        self.target = target
        self.label = target.label
        # The principal AWS authenticates: the function tells, with its first answer.
        self.operator: str | None = None

    def call(self, body: dict[str, Any], *, progress: Progress | None = None) -> commands.Answer:
        level = requests.level_needed(requests.parse(body, max_rows=self.max_rows))
        url = self.target.urls[level]
        data = commands.encode(body).encode()
        try:
            headers = signed_headers(url, data, self.target.region, self.target.credentials)
        except Exception as exc:  # botocore's credential providers raise many kinds
            raise RemoteCallFailed(
                f"cannot sign the request with your AWS credentials: {exc}"
            ) from exc
        status, answer = self._post(url, data, headers)
        if status == 200 and isinstance(answer, dict) and isinstance(answer.get("result"), dict):
            self.operator = answer.get("operator") or self.operator
            return commands.Answer(answer["result"], list(answer.get("messages") or []))
        raise self._failure(status, answer, level)

    def _post(self, url: str, data: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")  # noqa: S310 - the stack's https URL, or dev's loopback one
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:  # noqa: S310
                status, raw = reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except TimeoutError as exc:
            raise RemoteCallFailed(
                f"{self.label}: no answer from its operator function within {TIMEOUT_S:.0f} s "
                f"({url}); an action may have been partly done: look with `events list` "
                "before running it again",
                EXIT_UNREACHABLE,
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RemoteCallFailed(
                f"{self.label}: cannot reach its operator function at {url}: {reason}",
                EXIT_UNREACHABLE,
            ) from exc
        try:
            return status, json.loads(raw or b"null")
        except ValueError:
            return status, raw.decode("utf-8", "replace")[:300]

    def _failure(self, status: int, answer: Any, level: str) -> WebhookInboxError:
        ours = isinstance(answer, dict) and isinstance(answer.get("error"), str)
        if ours and status in _ERRORS:
            return _ERRORS[status](answer["error"])
        if ours and status == 503:
            return RemoteCallFailed(f"{self.label}: {answer['error']}", EXIT_UNREACHABLE)
        if ours:
            return RemoteCallFailed(f"{self.label}: {answer['error']} ({status})")
        if status == 403:
            which = "act" if level == requests.ACT else "read"
            policy = POLICIES[level]
            return RemoteCallFailed(
                f"{self.label}: AWS refused the call (403): your AWS principal may not call the "
                f"operator's {which} function URL: attach the stack's {policy} (output "
                f"{POLICY_OUTPUTS[level]}) to your user or role"
            )
        if status == 502:
            group = f"/aws/lambda/{self.target.stack or '<stack>'}/operator-{level}"
            return RemoteCallFailed(
                f"{self.label}: the operator function failed (502: it raised, timed out or ran "
                f"out of memory): its log group {group} says why"
            )
        return RemoteCallFailed(f"{self.label}: the operator URL answered {status}: {answer}")

    def close(self) -> None:
        pass
