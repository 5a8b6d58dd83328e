"""The environment the function sees, built the way ``sam local invoke`` builds a container's.

Only the variables the template declares for the function are set. Each takes, highest first:
the ``--env-vars`` file's entry for the function, its ``Parameters`` entry (applies to every
function), the same name in the caller's shell, then the template's value. A template value only
a deployed stack has (``!Ref ProcessingQueue``) must come from one of the others: every such
variable left without a value is reported by name. Entries the template does not declare are
ignored, as SAM ignores them (a function's own undeclared entries are reported: likely typos).

Beside them the process gets Lambda's own variables (region, function name, memory, handler,
task root) and the caller's AWS SDK settings (credentials, profile, ``AWS_ENDPOINT_URL*``),
which is how a local stack such as moto is reached; nothing else from the shell leaks in. A
caller with no credentials at all gets the placeholders ``sam local`` gives (a local stack takes
any key; without one botocore refuses to send anything).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webhook_inbox.errors import ConfigurationError
from webhook_inbox_tools.local_invoke.template import FunctionSpec, Unresolved

# What the AWS SDK reads from the environment: passed through like sam passes credentials.
SDK_SETTINGS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CA_BUNDLE",
    "AWS_ENDPOINT_URL",
    "HOME",  # where the SDK finds ~/.aws for a profile
)
SDK_PREFIXES = ("AWS_ENDPOINT_URL_",)
# samcli.local.lambdafn.env_vars: what a function gets when the caller has no credentials.
PLACEHOLDER_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "defaultkey",
    "AWS_SECRET_ACCESS_KEY": "defaultsecret",
}
# Lambda's own PATH and locale, not the caller's: the function must not find local tools.
BASE_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "en_US.UTF-8", "TZ": ":UTC"}


# Set from a deployed stack's resource, but with a meaning when empty, which is what a local run
# wants unless told otherwise: no idle ledger, so nothing marks and every sweeper run connects
# (docs/design.md, "Idle means idle").
EMPTY_LOCALLY = {"IDLE_LEDGER_BUCKET"}


class MissingVariables(ConfigurationError):
    """Variables the template sets from resources that do not exist locally."""


def read_env_vars_file(path: Path | None) -> dict[str, dict[str, Any]]:
    """SAM's ``--env-vars`` JSON: ``{"FunctionLogicalId": {...}, "Parameters": {...}}``."""
    if path is None:
        return {}
    try:
        loaded = json.loads(path.read_text("utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{path} is not JSON: {exc}") from None
    if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
        raise ConfigurationError(
            f'{path}: expected {{"FunctionLogicalId": {{"VAR": "value"}}, "Parameters": {{...}}}}'
        )
    return loaded


def _text(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigurationError(f"{name}: a variable's value must be a string, number or boolean")


def function_variables(
    spec: FunctionSpec, env_file: Mapping[str, Mapping[str, Any]], shell: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """(the function's variables, the env-vars file's names the template does not declare)."""
    everyone = env_file.get("Parameters", {})
    own = env_file.get(spec.logical_id, {})
    values: dict[str, str] = {}
    missing: list[str] = []
    for name, declared in spec.environment.items():
        if name in own:
            values[name] = _text(name, own[name])
        elif name in everyone:
            values[name] = _text(name, everyone[name])
        elif name in shell:
            values[name] = shell[name]
        elif isinstance(declared, Unresolved) and name in EMPTY_LOCALLY:
            values[name] = ""
        elif isinstance(declared, Unresolved):
            missing.append(f"  {name} (the template sets it to {declared.what})")
        else:
            values[name] = declared
    if missing:
        raise MissingVariables(
            f"{spec.logical_id} needs {len(missing)} variable(s) that only a deployed stack "
            "has; give each a local value in --env-vars FILE under "
            f'"{spec.logical_id}" (or "Parameters" for every function):\n' + "\n".join(missing)
        )
    # "Parameters" is meant for every function, so only the function's own entries can be typos.
    ignored = sorted(set(own) - set(spec.environment))
    return values, ignored


def caller_has_credentials(shell: Mapping[str, str]) -> bool:
    """Whether the SDK could find credentials of the caller's: variables, a profile, its files."""
    if shell.get("AWS_ACCESS_KEY_ID") or shell.get("AWS_PROFILE"):
        return True
    files = [shell.get("AWS_SHARED_CREDENTIALS_FILE"), shell.get("AWS_CONFIG_FILE")]
    if shell.get("HOME"):
        files += [f"{shell['HOME']}/.aws/credentials", f"{shell['HOME']}/.aws/config"]
    return any(name and Path(name).is_file() for name in files)


def process_environment(
    spec: FunctionSpec,
    variables: Mapping[str, str],
    *,
    task_root: Path,
    region: str,
    shell: Mapping[str, str],
) -> dict[str, str]:
    """Everything the child process gets: SDK settings, the function's variables, Lambda's."""
    env = dict(BASE_ENVIRONMENT)
    if not caller_has_credentials(shell):
        env.update(PLACEHOLDER_CREDENTIALS)
    env.update(
        {
            name: value
            for name, value in shell.items()
            if name in SDK_SETTINGS or name.startswith(SDK_PREFIXES)
        }
    )
    env.update(variables)
    # Reserved by Lambda: a function cannot override these, so they go last.
    env.update(
        {
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{spec.runtime}",
            "AWS_LAMBDA_FUNCTION_NAME": spec.logical_id,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
            "AWS_LAMBDA_LOG_GROUP_NAME": spec.log_group,
            "AWS_LAMBDA_LOG_STREAM_NAME": "webhook-inbox-invoke",
            "LAMBDA_TASK_ROOT": str(task_root),
            "_HANDLER": spec.handler,
        }
    )
    return env
