"""The account around the stack: the stack itself and Lambda's concurrency pool."""

from __future__ import annotations

import re

from webhook_inbox_tools.cli.preflight.common import (
    FAIL,
    OK,
    WARN,
    Clients,
    Finding,
    Options,
    could_not_check,
)

# python3.13 Lambda: the stack's names are built from the stack name (alarms, bus, log groups).
STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
STACK_STATES_THAT_BLOCK = re.compile(r"(ROLLBACK_COMPLETE|_FAILED|_IN_PROGRESS)$")
STACK_STATES_THAT_BLOCK_EXCEPT = {"UPDATE_ROLLBACK_COMPLETE"}
# Processor instances plus the ingest bursts and the sweeper beside them.
CONCURRENCY_HEADROOM = 10
# Lambda refuses a reservation that would leave fewer unreserved concurrent executions.
UNRESERVED_MINIMUM = 100
LAMBDA_CONCURRENCY_QUOTA = "L-B99A9384"


# --- stack ---------------------------------------------------------------------------------


def check_stack(aws: Clients, opts: Options) -> list[Finding]:
    name = opts.stack_name
    if not STACK_NAME.match(name):
        return [
            Finding(
                FAIL,
                "stack name",
                f"{name!r} is not a valid stack name",
                "use letters, digits and hyphens, starting with a letter, at most 128 characters",
            )
        ]
    try:
        stacks = aws.cloudformation.describe_stacks(StackName=name)["Stacks"]
    except Exception as exc:  # noqa: BLE001 - ClientError: "does not exist" is the common case
        if "does not exist" in str(exc):
            return [Finding(OK, "stack name", f"{name}: valid; a new stack will be created")]
        return [could_not_check("stack name", exc, "cloudformation:DescribeStacks", aws.region)]
    status = stacks[0]["StackStatus"]
    if STACK_STATES_THAT_BLOCK.search(status) and status not in STACK_STATES_THAT_BLOCK_EXCEPT:
        fix = (
            "wait until it finishes, then run preflight again"
            if status.endswith("_IN_PROGRESS")
            else f"delete it first (aws cloudformation delete-stack --stack-name {name}), "
            "or deploy under another --stack-name"
        )
        return [Finding(FAIL, "stack name", f"stack {name} exists in state {status}", fix)]
    return [Finding(OK, "stack name", f"{name}: exists ({status}); the deploy updates it")]


# --- quotas --------------------------------------------------------------------------------


def check_concurrency(aws: Clients, opts: Options) -> list[Finding]:
    """Enough unreserved concurrency for the processor beside ingest; when the template reserves
    ingest's (Endpoint=FunctionUrl: the throttle of its URL; a created database without RDS
    Proxy: the bound on its connections), room for that reservation too."""
    check = "Lambda concurrency"
    try:
        limits = aws.lambda_.get_account_settings()["AccountLimit"]
    except Exception as exc:  # noqa: BLE001 - any AWS error is this check's finding
        return [could_not_check(check, exc, "lambda:GetAccountSettings", aws.region)]
    findings = []
    # A deployed stack's reservation is given back to the pool when the deploy changes it.
    held = _ingest_reservation(aws, opts)
    if held is None:
        findings.append(
            Finding(
                WARN,
                check,
                "could not read the deployed ingest function's reserved concurrency; counted 0",
                "run preflight with a role allowed cloudformation:DescribeStackResource, "
                "lambda:GetFunctionConcurrency",
            )
        )
    unreserved = int(limits["UnreservedConcurrentExecutions"]) + (held or 0)
    needed = opts.processor_max_concurrency + CONCURRENCY_HEADROOM
    why, instead = _reservation(opts)
    if not why:
        if unreserved < needed:
            findings.append(
                Finding(
                    FAIL,
                    check,
                    f"{unreserved} unreserved concurrent executions; ProcessorMaxConcurrency="
                    f"{opts.processor_max_concurrency} plus ingest and the sweeper need {needed}",
                    f"request more (Service Quotas, Lambda {LAMBDA_CONCURRENCY_QUOTA}) or lower "
                    "ProcessorMaxConcurrency",
                )
            )
        else:
            findings.append(
                Finding(OK, check, f"{unreserved} unreserved concurrent executions (need {needed})")
            )
        return findings
    reserve = opts.ingest_reserved_concurrency
    left, floor = unreserved - reserve, max(UNRESERVED_MINIMUM, needed)
    if left < floor:
        most = unreserved - floor
        findings.append(
            Finding(
                FAIL,
                check,
                f"{unreserved} unreserved concurrent executions: reserving "
                f"IngestReservedConcurrency={reserve} {why} leaves {left}, and "
                f"Lambda keeps at least {UNRESERVED_MINIMUM} unreserved (the processor and "
                f"sweeper need {needed} of them)",
                (f"lower IngestReservedConcurrency to {most} or less, " if most >= 1 else "")
                + f"request more (Service Quotas, Lambda {LAMBDA_CONCURRENCY_QUOTA}), "
                f"or {instead} (no reservation)",
            )
        )
    else:
        findings.append(
            Finding(
                OK,
                check,
                f"{unreserved} unreserved concurrent executions: {reserve} reserved {why} "
                f"leaves {left} (need {floor})",
            )
        )
    return findings


def _reservation(opts: Options) -> tuple[str, str]:
    """Why the template reserves ingest's concurrency for these settings ('' when it does not),
    and the settings that would not."""
    without_proxy = not opts.database_secret_arn and not opts.create_database_proxy
    if opts.endpoint == "FunctionUrl":
        instead = "deploy with Endpoint=HttpApi" + (
            " and CreateDatabaseProxy=true" if without_proxy else ""
        )
        return "for the Function URL", instead
    if without_proxy:
        return (
            "to bound ingest's database connections (CreateDatabaseProxy=false)",
            "keep RDS Proxy (CreateDatabaseProxy=true)",
        )
    return "", ""


def _ingest_reservation(aws: Clients, opts: Options) -> int | None:
    """The deployed stack's ingest reservation: 0 without a stack or a reservation, None when
    it cannot be read."""
    try:
        resource = aws.cloudformation.describe_stack_resource(
            StackName=opts.stack_name, LogicalResourceId="IngestFunction"
        )["StackResourceDetail"]
    except Exception as exc:  # noqa: BLE001 - ClientError: "does not exist" is the common case
        return 0 if "does not exist" in str(exc) else None
    try:
        found = aws.lambda_.get_function_concurrency(FunctionName=resource["PhysicalResourceId"])
    except Exception:  # noqa: BLE001 - any AWS error: unknown
        return None
    return int(found.get("ReservedConcurrentExecutions", 0))
